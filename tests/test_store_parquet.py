"""Tests of dyna.store.parquet: explicit dtypes, all-null columns, round trips."""

import numpy as np
import polars as pl
import pytest

from dyna.errors import ConfigError, MissingFileError
from dyna.store.parquet import polars_schema, read_parquet, write_parquet

SCHEMA = [("tenant_id", "str"), ("task_type", "str"), ("reward", "float"), ("timestamp", "float"),
          ("outcome_verified_by", "str"), ("steps", "int"), ("metadata", "json"),
          ("features", "vector")]
DIM = 3


def cols(n=4):
    rng = np.random.default_rng(0)
    verified = np.empty(n, dtype=object)  # all None: the all-null column
    return {"id": np.arange(10, 10 + n, dtype=np.int64),
            "tenant_id": np.array(["t1", "t2", "é", ""][:n] * (n // 4 + 1), dtype=object)[:n],
            "task_type": np.array([f"k{i}" for i in range(n)], dtype=object),
            "reward": rng.standard_normal(n), "timestamp": np.arange(n) + 0.125,
            "outcome_verified_by": verified, "steps": np.arange(n, dtype=np.int64) * 7,
            "metadata": np.array(['{"a": 1}'] * n, dtype=object),
            "features": rng.standard_normal((n, DIM)).astype(np.float32)}


def test_round_trip_identical_and_all_null_keeps_dtype(tmp_path):
    c = cols()
    assert write_parquet(tmp_path / "r.parquet", c, SCHEMA, DIM) == 4
    df = pl.read_parquet(tmp_path / "r.parquet")
    assert df.schema["outcome_verified_by"] == pl.String  # not Null
    assert dict(df.schema) == polars_schema(SCHEMA, DIM)
    back = read_parquet(tmp_path / "r.parquet", SCHEMA, DIM)
    assert set(back) == set(c)
    for k in c:
        assert back[k].dtype == c[k].dtype, k
        np.testing.assert_array_equal(back[k], c[k])
    assert back["outcome_verified_by"].tolist() == [None] * 4


def test_empty_round_trip(tmp_path):
    c = {k: v[:0] for k, v in cols().items()}
    write_parquet(tmp_path / "e.parquet", c, SCHEMA, DIM)
    back = read_parquet(tmp_path / "e.parquet", SCHEMA, DIM)
    assert back["features"].shape == (0, DIM) and back["id"].dtype == np.int64


def test_foreign_null_column_is_cast_and_missing_column_refused(tmp_path):
    c = cols()
    df = pl.DataFrame({k: (c[k].tolist() if c[k].dtype == object else c[k])
                       for k in c if k not in ("features", "outcome_verified_by")})
    df = df.with_columns(pl.lit(None).alias("outcome_verified_by"),
                         pl.Series("features", c["features"], dtype=pl.Array(pl.Float32, DIM)))
    assert df.schema["outcome_verified_by"] == pl.Null
    df.write_parquet(tmp_path / "f.parquet")
    back = read_parquet(tmp_path / "f.parquet", SCHEMA, DIM)
    assert back["outcome_verified_by"].tolist() == [None] * 4
    df.drop("task_type").write_parquet(tmp_path / "g.parquet")
    with pytest.raises(ConfigError) as e:
        read_parquet(tmp_path / "g.parquet", SCHEMA, DIM)
    assert e.value.field == "task_type"
    df.with_columns(pl.lit("abc").alias("reward")).write_parquet(tmp_path / "h.parquet")
    with pytest.raises(ConfigError) as e:
        read_parquet(tmp_path / "h.parquet", SCHEMA, DIM)
    assert e.value.field == "reward"
    with pytest.raises(MissingFileError):
        read_parquet(tmp_path / "nope.parquet", SCHEMA, DIM)
