//! A physical optimizer rule that makes joins give their thread back.
//!
//! A join can produce batch after batch without polling its inputs (a
//! cross join or nested-loop join pairs one input row with every row of
//! the other side; a hash join probes many matches for one input batch), so
//! DataFusion's yield points, which sit in the scans and exchanges, are
//! never reached: the task runs until the join is done. Such a task holds
//! a runtime thread, so neither a cancel request nor `statement_timeout`
//! can stop it (dropping its stream only takes effect at its next yield),
//! and on a two-core machine two of them stall every other connection.
//! Each join's output therefore goes through DataFusion's `CooperativeExec`,
//! which spends a unit of the task's budget per batch and yields when it
//! runs out.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, SortMergeJoinExec, SymmetricHashJoinExec,
};
use datafusion::physical_plan::ExecutionPlan;

#[derive(Debug, Default)]
pub struct YieldingJoins;

fn is_join(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<CrossJoinExec>()
        || plan.is::<NestedLoopJoinExec>()
        || plan.is::<HashJoinExec>()
        || plan.is::<SortMergeJoinExec>()
        || plan.is::<SymmetricHashJoinExec>()
}

impl PhysicalOptimizerRule for YieldingJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            // A join already under a CooperativeExec is left as it is.
            let wrapped = node.is::<CooperativeExec>();
            let children = node.children();
            if !wrapped && children.iter().any(|c| is_join(c)) {
                let new_children = children
                    .into_iter()
                    .map(|c| match is_join(c) {
                        true => Arc::new(CooperativeExec::new(c.clone())) as Arc<dyn ExecutionPlan>,
                        false => c.clone(),
                    })
                    .collect();
                let options = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                return Ok(Transformed::yes(
                    node.replace_children(new_children, options)?,
                ));
            }
            Ok(Transformed::no(node))
        })
        .map(|t| t.data)
        .map(|plan| match is_join(&plan) {
            true => Arc::new(CooperativeExec::new(plan)) as Arc<dyn ExecutionPlan>,
            false => plan,
        })
    }

    fn name(&self) -> &str {
        "yielding_joins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
