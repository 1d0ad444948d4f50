//! Errors as the wire sends them: a [`SluiceError`] becomes pgwire's
//! `ErrorResponse` with its SQLSTATE and PostgreSQL's words. The layers
//! below know no protocol; this is the one place errors meet it.

use pgwire::error::{ErrorInfo, PgWireError};

use crate::error::SluiceError;

pub(crate) trait IntoPgWire {
    fn into_pg(self) -> PgWireError;
}

impl IntoPgWire for SluiceError {
    fn into_pg(self) -> PgWireError {
        PgWireError::UserError(Box::new(error_info(self)))
    }
}

/// An ERROR with the error's SQLSTATE and message.
pub(crate) fn error_info(e: SluiceError) -> ErrorInfo {
    ErrorInfo::new("ERROR".into(), e.sqlstate().into(), e.message())
}
