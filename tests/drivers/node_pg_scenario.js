// node-postgres (`pg` from npm) against Sluice: parameters, named prepared
// statements, NULLs, a cursor, and errors with their SQLSTATE.
const assert = require("assert");
const { Client } = require("pg");
const Cursor = require("pg-cursor");

async function main() {
  const port = Number(process.argv[2]);
  const c = new Client({ host: "127.0.0.1", port, user: "node", database: "sluice" });
  await c.connect();
  await c.query("CREATE TABLE np (id BIGINT NOT NULL, name TEXT, score DOUBLE PRECISION, at TIMESTAMP)");
  for (let i = 0; i < 20; i++) {
    // A named query is prepared once and bound each time.
    await c.query({
      name: "ins",
      text: "INSERT INTO np VALUES ($1, $2, $3, $4)",
      values: [i, i % 4 === 0 ? null : `n${i}`, i / 4, "2026-01-01 10:00:00"],
    });
  }
  const r = await c.query("SELECT id, name, score FROM np WHERE id >= $1 ORDER BY id", [16]);
  assert.deepStrictEqual(r.rows.map((row) => Number(row.id)), [16, 17, 18, 19]);
  assert.strictEqual(r.rows[0].name, null);
  assert.strictEqual(r.rows[1].score, 4.25);
  const cursor = c.query(new Cursor("SELECT id FROM np ORDER BY id"));
  const first = await cursor.read(7);
  const rest = await cursor.read(100);
  assert.strictEqual(first.length + rest.length, 20);
  await cursor.close();
  await assert.rejects(c.query("SELECT * FROM nowhere"), (e) => e.code === "42P01");
  await assert.rejects(c.query("INSERT INTO np VALUES (NULL, 'x', 1, NULL)"), (e) => e.code === "23502");
  const v = await c.query("SELECT version() AS v");
  assert.ok(v.rows[0].v.startsWith("PostgreSQL 16.6 (Sluice"), v.rows[0].v);
  // A transaction block: the connection's own until COMMIT; an error
  // aborts it (25P02) and its COMMIT answers ROLLBACK.
  const other = new Client({ host: "127.0.0.1", port, user: "node", database: "sluice" });
  await other.connect();
  await c.query("CREATE TABLE ntx (id BIGINT, v TEXT) APPEND ONLY");
  const count = async (client) => (await client.query("SELECT count(*)::int AS n FROM ntx")).rows[0].n;
  await c.query("BEGIN");
  for (let i = 0; i < 5; i++) await c.query("INSERT INTO ntx VALUES ($1, $2)", [i, "x"]);
  assert.strictEqual(await count(c), 5);
  assert.strictEqual(await count(other), 0);
  await assert.rejects(c.query("SELECT 1/0"), (e) => e.code === "22012");
  await assert.rejects(c.query("INSERT INTO ntx VALUES (9, $1)", ["z"]), (e) => e.code === "25P02");
  assert.strictEqual((await c.query("COMMIT")).command, "ROLLBACK");
  assert.strictEqual(await count(other), 0);
  await c.query("BEGIN");
  await c.query("INSERT INTO ntx VALUES (1, $1)", ["kept"]);
  assert.strictEqual((await c.query("COMMIT")).command, "COMMIT");
  assert.strictEqual(await count(other), 1);
  await other.end();
  await c.end();
  console.log("node-postgres scenario ok");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
