// knex (over node-postgres) against Sluice: a filtered and an ordered read
// with .limit() and .offset() (sent as untyped $n parameters), rows
// written with .insert(), a materialized view read, and the schema
// builder's introspection (hasTable, hasColumn, columnInfo).
// Usage: node knex_scenario.js PORT. Exits non-zero on a failure.
const assert = require("assert");
const knex = require("knex")({
  client: "pg",
  connection: { host: "127.0.0.1", port: Number(process.argv[2]), user: "sluice", database: "sluice" },
  pool: { min: 1, max: 2 },
});

(async () => {
  await knex.raw("CREATE TABLE kx (id BIGINT, name TEXT, score DOUBLE PRECISION, doc JSONB, at TIMESTAMPTZ)");
  await knex("kx").insert([
    { id: 1, name: "a", score: 1.5, doc: { k: [1, 2] }, at: new Date("2026-01-01T00:00:00Z") },
    { id: 2, name: "b", score: null, doc: null, at: null },
    { id: 3, name: "a", score: 3.5, doc: { k: 3 }, at: null },
  ]);
  const firstTwo = await knex("kx").select("id").orderBy("id", "desc").limit(2);
  assert.deepStrictEqual(firstTwo.map((r) => Number(r.id)), [3, 2]);
  const paged = await knex("kx").select("id").where("name", "a").orderBy("id").limit(1).offset(1);
  assert.deepStrictEqual(paged.map((r) => Number(r.id)), [3]);
  const row = await knex("kx").where({ id: 1 }).first();
  assert.deepStrictEqual(row.doc, { k: [1, 2] });
  assert.strictEqual(row.score, 1.5);
  assert.strictEqual(row.at.toISOString(), "2026-01-01T00:00:00.000Z");
  await knex.raw("CREATE MATERIALIZED VIEW kx_names AS SELECT name, count(*) AS n FROM kx GROUP BY name");
  await knex.raw("REFRESH MATERIALIZED VIEW kx_names");
  const names = await knex("kx_names").select("name", "n").orderBy("name");
  assert.deepStrictEqual(names.map((r) => [r.name, Number(r.n)]), [["a", 2], ["b", 1]]);
  assert.strictEqual(await knex.schema.hasTable("kx"), true);
  assert.strictEqual(await knex.schema.hasTable("nope"), false);
  assert.strictEqual(await knex.schema.hasColumn("kx", "score"), true);
  const info = await knex("kx").columnInfo();
  assert.strictEqual(info.id.type, "bigint");
  assert.strictEqual(info.doc.type, "jsonb");
  await knex.destroy();
  console.log("knex ok");
})().catch(async (e) => {
  console.error(e);
  await knex.destroy();
  process.exit(1);
});
