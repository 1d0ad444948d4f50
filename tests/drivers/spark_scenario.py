"""Spark (pyspark with pgJDBC) against Sluice: a table read whole, an
ordered subquery read with a limit (Spark wraps it in a subquery of its
own), a read split into partitions on a numeric column, NUMERIC(12,3)
kept as decimal(12,3), and rows appended with write.jdbc.

Usage: spark_scenario.py PORT JDBC_JAR. Exits non-zero on a failure."""
import decimal
import sys

import psycopg
from pyspark.sql import SparkSession

PORT, JAR = sys.argv[1], sys.argv[2]
with psycopg.connect(f"host=127.0.0.1 port={PORT} user=sluice dbname=sluice", autocommit=True) as pg:
    pg.execute("CREATE TABLE sp (id BIGINT, name TEXT, amount NUMERIC(12,3)) WITH (partitions = 2)")
    pg.execute("INSERT INTO sp SELECT x, 'n' || x, x * 1.5 FROM generate_series(1, 100) x")

spark = (SparkSession.builder.master("local[2]").appName("sluice-scenario")
         .config("spark.jars", JAR).config("spark.ui.enabled", "false").getOrCreate())
url = f"jdbc:postgresql://127.0.0.1:{PORT}/sluice"
props = {"user": "sluice", "password": "", "driver": "org.postgresql.Driver"}
try:
    whole = spark.read.jdbc(url, "sp", properties=props)
    assert dict(whole.dtypes) == {"id": "bigint", "name": "string", "amount": "decimal(12,3)"}, whole.dtypes
    assert whole.count() == 100
    top = spark.read.jdbc(url, "(SELECT id FROM sp ORDER BY id DESC) AS q", properties=props).limit(3)
    assert [r.id for r in top.collect()] == [100, 99, 98]
    split = spark.read.jdbc(url, "sp", column="id", lowerBound=1, upperBound=101, numPartitions=4,
                            properties=props)
    assert split.rdd.getNumPartitions() == 4
    assert sorted(r.id for r in split.collect()) == list(range(1, 101))
    assert split.filter("id = 7").collect()[0].amount == decimal.Decimal("10.500")
    spark.createDataFrame([(101, "new", decimal.Decimal("1.250"))], "id long, name string, amount decimal(12,3)") \
        .write.jdbc(url, "sp", mode="append", properties=props)
    assert spark.read.jdbc(url, "sp", properties=props).count() == 101
finally:
    spark.stop()
print("spark ok")
