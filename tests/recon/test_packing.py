"""Packing routed records by key in Arrow, and unpacking them for the reconciler: nothing lost, nothing moved."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from wayline.recon.packing import clocked, pack, unpacked

ROUTED = pa.schema([("recon_id", pa.string()), ("side", pa.string()), ("id", pa.string()),
                    ("source", pa.string()), ("time", pa.int64()), ("bucket", pa.int32())])


def batch(rows: list[tuple]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [dict(zip(("recon_id", "side", "id", "source", "time", "bucket"), row, strict=True)) for row in rows],
        schema=ROUTED)


def records(frame: pd.DataFrame) -> list[tuple]:
    return list(zip(frame["side"].tolist(), frame["id"].tolist(), frame["source"].tolist(),
                    frame["time"].tolist(), strict=True))


def test_one_row_per_key_and_batch_with_every_record_aligned_in_input_order() -> None:
    first = batch([
        ("r1", "expected", "a", "s1", 10, 0), ("r1", "actual", "b", "s2", 11, 1),
        ("r1", "actual", "a", "s3", 12, 0), ("r2", "expected", "a", "s1", 13, 0),
        ("r1", "expected", "a", "s1", 14, 0),  # a duplicate stays a record of its own
        ("r1", "heartbeat", "", "", 15, 0),
    ])
    second = batch([("r1", "expected", "c", "s4", 16, 0)])
    packed = pa.Table.from_batches(list(pack([first, batch([]), second])))

    assert packed.column_names == ["recon_id", "bucket", "side", "id", "source", "time"]
    rows = packed.to_pylist()
    assert [(row["recon_id"], row["bucket"]) for row in rows] == [("r1", 0), ("r1", 1), ("r2", 0), ("r1", 0)]
    assert rows[0] == {"recon_id": "r1", "bucket": 0, "side": ["expected", "actual", "expected", "heartbeat"],
                       "id": ["a", "a", "a", ""], "source": ["s1", "s3", "s1", ""], "time": [10, 12, 14, 15]}

    mine = packed.to_pandas()
    one_key = mine[(mine["recon_id"] == "r1") & (mine["bucket"] == 0)]
    frame = unpacked([one_key.iloc[:1], one_key.iloc[1:]])  # a key's rows may come in several frames
    assert records(frame) == [("expected", "a", "s1", 10), ("actual", "a", "s3", 12), ("expected", "a", "s1", 14),
                              ("heartbeat", "", "", 15), ("expected", "c", "s4", 16)]
    assert all(type(t) is int for t in frame["time"].tolist())


def test_unpacking_nothing_gives_no_records() -> None:
    assert records(unpacked([])) == []


def test_every_bucket_of_a_reconciliation_gets_its_newest_time_and_unreadable_records_move_no_clock() -> None:
    routed = batch([("r1", "expected", "a", "s1", 10, 2), ("r1", "unreadable", "", "", 99, 1),
                    ("r2", "heartbeat", "", "", 7, 0), ("r1", "actual", "b", "s1", 12, 0),
                    ("r3", "unreadable", "", "s1", 50, 1)])
    out = clocked(routed, 3)
    assert out.schema == ROUTED
    assert out.to_pylist()[:5] == routed.to_pylist()  # the records as they came
    assert [(row["recon_id"], row["side"], row["time"], row["bucket"]) for row in out.to_pylist()[5:]] == [
        ("r1", "heartbeat", 12, 0), ("r1", "heartbeat", 12, 1), ("r1", "heartbeat", 12, 2),
        ("r2", "heartbeat", 7, 0), ("r2", "heartbeat", 7, 1), ("r2", "heartbeat", 7, 2)]
