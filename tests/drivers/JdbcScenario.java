// pgJDBC (Debian's package) against Sluice: prepared INSERTs past the
// driver's server-prepare threshold, batches, a parameterized query, NULLs,
// errors with their SQLSTATE, and DatabaseMetaData as DBeaver asks for it.
import java.sql.*;
import java.util.*;

public class JdbcScenario {
  static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  static long count(Connection c, String table) throws SQLException {
    try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
      rs.next();
      return rs.getLong(1);
    }
  }

  // Autocommit off, as services and DBeaver run it: a batch is the
  // connection's own until commit(); rollback() and a savepoint take back.
  static void transactions(String url) throws Exception {
    try (Connection c = DriverManager.getConnection(url); Connection other = DriverManager.getConnection(url)) {
      try (Statement st = c.createStatement()) {
        st.execute("CREATE TABLE jtx (id BIGINT, v TEXT) APPEND ONLY");
      }
      c.setAutoCommit(false);
      for (int round = 0; round < 2; round++) {
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO jtx VALUES (?, ?)")) {
          for (int i = 0; i < 20; i++) {
            ps.setLong(1, i);
            ps.setString(2, "v" + i);
            ps.addBatch();
          }
          ps.executeBatch();
        }
        check(count(c, "jtx") == 20, "own rows " + count(c, "jtx"));
        check(count(other, "jtx") == 0, "rows seen before commit");
        if (round == 0) c.rollback();
      }
      Savepoint sp = c.setSavepoint();
      try (Statement st = c.createStatement()) {
        st.execute("INSERT INTO jtx VALUES (100, 'undone')");
      }
      c.rollback(sp);
      c.commit();
      check(count(other, "jtx") == 20, "committed " + count(other, "jtx"));
      // REPEATABLE READ reads one snapshot; read-only refuses writes.
      c.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
      check(c.getTransactionIsolation() == Connection.TRANSACTION_REPEATABLE_READ, "isolation");
      long seen = count(c, "jtx");
      try (Statement st = other.createStatement()) {
        st.execute("INSERT INTO jtx VALUES (200, 'later')");
      }
      check(count(c, "jtx") == seen, "snapshot moved");
      c.commit();
      check(count(c, "jtx") == seen + 1, "next transaction sees the row");
      c.commit();
      c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
      c.setReadOnly(true);
      try (Statement st = c.createStatement()) {
        st.execute("INSERT INTO jtx VALUES (300, 'ro')");
        throw new AssertionError("write in a read-only transaction");
      } catch (SQLException e) {
        check("25006".equals(e.getSQLState()), "read only " + e.getSQLState());
      }
      c.rollback();
      c.setReadOnly(false);
      check(count(other, "jtx") == seen + 1, "committed " + count(other, "jtx"));
      try {
        c.setTransactionIsolation(Connection.TRANSACTION_SERIALIZABLE);
        count(c, "jtx");
        throw new AssertionError("SERIALIZABLE accepted");
      } catch (SQLException e) {
        check("0A000".equals(e.getSQLState()), "serializable " + e.getSQLState());
      }
    }
  }

  // UPDATE and DELETE as prepared statements with parameters.
  static void updates(String url) throws Exception {
    try (Connection c = DriverManager.getConnection(url)) {
      try (Statement st = c.createStatement()) {
        st.execute("CREATE TABLE jkv (k BIGINT PRIMARY KEY, v TEXT)");
        st.execute("INSERT INTO jkv VALUES (1, 'a'), (2, 'b'), (3, 'c')");
      }
      try (PreparedStatement ps = c.prepareStatement("UPDATE jkv SET v = ? WHERE k = ?")) {
        for (int round = 0; round < 6; round++) {
          ps.setString(1, "v" + round);
          ps.setLong(2, 1 + round % 2);
          check(ps.executeUpdate() == 1, "update counts one row");
        }
      }
      try (PreparedStatement ps = c.prepareStatement("DELETE FROM jkv WHERE k = ?")) {
        ps.setLong(1, 3);
        check(ps.executeUpdate() == 1, "delete counts one row");
      }
      try (Statement st = c.createStatement();
          ResultSet rs = st.executeQuery("SELECT k, v FROM jkv ORDER BY k")) {
        StringBuilder got = new StringBuilder();
        while (rs.next()) got.append(rs.getLong(1)).append('=').append(rs.getString(2)).append(' ');
        check(got.toString().equals("1=v4 2=v5 "), "rows after updates: " + got);
      }
    }
  }

  static final String LONG_QUERY =
      "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b";

  /** setQueryTimeout and Statement.cancel both send a cancel request. */
  static void cancels(String url) throws Exception {
    try (Connection c = DriverManager.getConnection(url)) {
      try (Statement st = c.createStatement()) {
        st.setQueryTimeout(1);
        long started = System.nanoTime();
        try {
          st.executeQuery(LONG_QUERY);
          check(false, "the query timed out");
        } catch (SQLException e) {
          check("57014".equals(e.getSQLState()), "query timeout " + e.getSQLState() + " " + e.getMessage());
        }
        check(System.nanoTime() - started < 5_000_000_000L, "query timeout took too long");
      }
      try (PreparedStatement ps = c.prepareStatement(LONG_QUERY)) {
        Thread canceller = new Thread(() -> {
          try {
            Thread.sleep(500);
            ps.cancel();
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        });
        canceller.start();
        try {
          ps.executeQuery();
          check(false, "the query was cancelled");
        } catch (SQLException e) {
          check("57014".equals(e.getSQLState()), "cancel " + e.getSQLState() + " " + e.getMessage());
        }
        canceller.join();
      }
      try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT 1")) {
        check(rs.next() && rs.getInt(1) == 1, "usable after a cancel");
      }
    }
  }

  // JSONB, NUMERIC(12,3) and VARCHAR(8) as ResultSetMetaData describes
  // them, from a table and from a view over it; JSONB reads as a JSON
  // object (PGobject of type jsonb).
  static void types(String url) throws Exception {
    try (Connection c = DriverManager.getConnection(url); Statement st = c.createStatement()) {
      st.execute("CREATE TABLE jtyped (id INT, doc JSONB, n NUMERIC(12,3), v VARCHAR(8))");
      st.execute("INSERT INTO jtyped VALUES (1, '{\"a\": [1, 2]}', 1.5, 'abc')");
      st.execute("CREATE MATERIALIZED VIEW jtyped_view AS SELECT doc, n, v FROM jtyped");
      st.execute("FLUSH");
      for (String from : new String[] {"jtyped", "jtyped_view"}) {
        for (int round = 0; round < 6; round++) {
          try (PreparedStatement ps = c.prepareStatement("SELECT doc, n, v FROM " + from);
              ResultSet rs = ps.executeQuery()) {
            ResultSetMetaData md = rs.getMetaData();
            check(md.getColumnTypeName(1).equals("jsonb"), "jsonb type " + md.getColumnTypeName(1));
            check(md.getColumnType(2) == Types.NUMERIC && md.getPrecision(2) == 12 && md.getScale(2) == 3,
                "numeric(12,3): " + md.getPrecision(2) + "," + md.getScale(2));
            check(md.getColumnType(3) == Types.VARCHAR && md.getPrecision(3) == 8
                && md.getColumnDisplaySize(3) == 8, "varchar(8): " + md.getPrecision(3));
            check(rs.next(), "a row from " + from);
            Object doc = rs.getObject(1);
            check(doc instanceof org.postgresql.util.PGobject
                && ((org.postgresql.util.PGobject) doc).getType().equals("jsonb")
                && rs.getString(1).replace(" ", "").equals("{\"a\":[1,2]}"), "jsonb value " + doc);
            check(rs.getBigDecimal(2).toString().equals("1.500"), "numeric value " + rs.getBigDecimal(2));
            check(rs.getString(3).equals("abc"), "varchar value");
          }
        }
      }
      // The scenario below checks the catalog lists exactly its own view.
      st.execute("DROP MATERIALIZED VIEW jtyped_view");
      st.execute("DROP TABLE jtyped");
    }
  }

  /** Statement.cancel() of a heavy query: 57014 within 200 ms. */
  static void cancel(String url) throws Exception {
    try (Connection c = DriverManager.getConnection(url); Statement st = c.createStatement()) {
      final long[] endedAt = {0};
      final String[] state = {null};
      Thread running = new Thread(() -> {
        try {
          st.executeQuery("SELECT count(*) FROM generate_series(1, 150000) a(x), "
              + "generate_series(1, 150000) b(x) WHERE a.x + b.x = 1");
        } catch (SQLException e) {
          state[0] = e.getSQLState();
          endedAt[0] = System.nanoTime();
        }
      });
      running.start();
      Thread.sleep(500);
      long asked = System.nanoTime();
      st.cancel();
      running.join(10000);
      check("57014".equals(state[0]), "cancel: " + state[0]);
      long ms = (endedAt[0] - asked) / 1_000_000;
      check(ms < 200, "cancel took " + ms + " ms");
      try (ResultSet rs = st.executeQuery("SELECT 1")) {
        check(rs.next() && rs.getInt(1) == 1, "the connection answers after a cancel");
      }
    }
  }

  public static void main(String[] args) throws Exception {
    String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/sluice?user=jdbc";
    types(url);
    cancel(url);
    try (Connection c = DriverManager.getConnection(url)) {
      try (Statement st = c.createStatement()) {
        st.execute("CREATE TABLE jd (id BIGINT NOT NULL, name TEXT, score DOUBLE PRECISION, at TIMESTAMP)");
        st.execute("CREATE MATERIALIZED VIEW jd_totals AS SELECT name, COUNT(*) AS n FROM jd GROUP BY name");
      }
      // pgJDBC switches to a named server-side statement at the 5th run.
      try (PreparedStatement ps = c.prepareStatement("INSERT INTO jd VALUES (?, ?, ?, ?)")) {
        for (int i = 0; i < 8; i++) {
          ps.setLong(1, i);
          ps.setString(2, i % 2 == 0 ? "even" : "odd");
          ps.setDouble(3, i * 0.5);
          ps.setTimestamp(4, Timestamp.valueOf("2026-01-01 10:00:0" + i));
          check(ps.executeUpdate() == 1, "insert " + i + " counts one row");
        }
        for (int i = 8; i < 12; i++) {
          ps.setLong(1, i);
          ps.setNull(2, Types.VARCHAR);
          ps.setNull(3, Types.DOUBLE);
          ps.setNull(4, Types.TIMESTAMP);
          ps.addBatch();
        }
        int[] counts = ps.executeBatch();
        check(counts.length == 4, "batch of 4");
      }
      try (PreparedStatement ps = c.prepareStatement("SELECT id, name, score FROM jd WHERE id >= ? ORDER BY id")) {
        for (int round = 0; round < 6; round++) {
          ps.setLong(1, 6);
          try (ResultSet rs = ps.executeQuery()) {
            List<Long> ids = new ArrayList<>();
            while (rs.next()) {
              ids.add(rs.getLong(1));
              if (rs.getLong(1) >= 8) {
                check(rs.getString(2) == null && rs.getObject(3) == null, "NULLs read back");
              }
            }
            check(ids.equals(Arrays.asList(6L, 7L, 8L, 9L, 10L, 11L)), "rows " + ids);
          }
        }
      }
      try (Statement st = c.createStatement()) {
        st.execute("FLUSH");
        try (ResultSet rs = st.executeQuery("SELECT n FROM jd_totals WHERE name = 'even'")) {
          check(rs.next() && rs.getLong(1) == 4, "view row");
        }
        try {
          st.executeQuery("SELECT * FROM nowhere");
          check(false, "missing table accepted");
        } catch (SQLException e) {
          check("42P01".equals(e.getSQLState()), "42P01, got " + e.getSQLState());
        }
      }
      DatabaseMetaData md = c.getMetaData();
      check(md.getDatabaseMajorVersion() >= 16, "major version " + md.getDatabaseMajorVersion());
      Set<String> tables = new HashSet<>();
      try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
        while (rs.next()) tables.add(rs.getString("TABLE_NAME"));
      }
      check(tables.contains("jd"), "getTables lists jd: " + tables);
      Map<String, String> nullable = new LinkedHashMap<>();
      try (ResultSet rs = md.getColumns(null, "public", "jd", "%")) {
        while (rs.next()) nullable.put(rs.getString("COLUMN_NAME"), rs.getString("IS_NULLABLE"));
      }
      check(nullable.keySet().equals(new LinkedHashSet<>(Arrays.asList("id", "name", "score", "at"))),
          "getColumns lists the table's columns: " + nullable);
      check("NO".equals(nullable.get("id")) && "YES".equals(nullable.get("name")), "nullability " + nullable);
      // Keys as DBeaver reads them: primary keys, indexes, foreign keys.
      try (Statement st = c.createStatement()) {
        st.execute("CREATE TABLE jd_plans (region TEXT, id BIGINT, price DOUBLE PRECISION, PRIMARY KEY (region, id))");
      }
      List<String> pk = new ArrayList<>();
      try (ResultSet rs = md.getPrimaryKeys(null, "public", "jd_plans")) {
        while (rs.next()) pk.add(rs.getString("COLUMN_NAME") + rs.getInt("KEY_SEQ") + rs.getString("PK_NAME"));
      }
      check(pk.equals(Arrays.asList("region1jd_plans_pkey", "id2jd_plans_pkey")), "getPrimaryKeys " + pk);
      try (ResultSet rs = md.getPrimaryKeys(null, "public", "jd")) {
        check(!rs.next(), "an append-only table has no primary key");
      }
      List<String> idx = new ArrayList<>();
      try (ResultSet rs = md.getIndexInfo(null, "public", "jd_plans", false, true)) {
        while (rs.next()) idx.add(rs.getString("INDEX_NAME") + ":" + rs.getString("COLUMN_NAME") + ":" + rs.getBoolean("NON_UNIQUE") + ":" + rs.getShort("ORDINAL_POSITION"));
      }
      check(idx.equals(Arrays.asList("jd_plans_pkey:region:false:1", "jd_plans_pkey:id:false:2")), "getIndexInfo " + idx);
      try (ResultSet rs = md.getImportedKeys(null, "public", "jd_plans")) {
        check(!rs.next(), "no foreign keys");
      }
      try (ResultSet rs = md.getExportedKeys(null, "public", "jd_plans")) {
        check(!rs.next(), "no foreign keys point here");
      }
      Set<String> matviews = new HashSet<>();
      try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"MATERIALIZED VIEW"})) {
        while (rs.next()) matviews.add(rs.getString("TABLE_NAME"));
      }
      check(matviews.equals(Collections.singleton("jd_totals")), "materialized views " + matviews);
      tables.clear();
      try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
        while (rs.next()) tables.add(rs.getString("TABLE_NAME"));
      }
      check(tables.equals(new HashSet<>(Arrays.asList("jd", "jd_plans"))), "tables " + tables);
      Set<String> schemas = new HashSet<>();
      try (ResultSet rs = md.getSchemas()) {
        while (rs.next()) schemas.add(rs.getString(1));
      }
      check(schemas.contains("public") && schemas.contains("sluice_catalog"), "schemas " + schemas);
    }
    transactions(url);
    updates(url);
    cancels(url);
    System.out.println("jdbc scenario ok");
  }
}
