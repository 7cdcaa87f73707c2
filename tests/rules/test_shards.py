from collections import Counter
from pathlib import Path

import pytest

from wayline.rules.shards import LAYOUT_FILE, ShardLayout, checkpoint_layout, partition_of, shard_values, spark_hash


@pytest.mark.parametrize(("spec", "shard", "expected"), [
    # Spark SQL's own answers: SELECT hash('data.user', 0), ... (PySpark 4.3.0)
    ("data.user", 0, -1085183756),
    ("data.user", 1, -123296870),
    ("data.user", 7, 803336077),
    ("", 5, 1074319300),
    ("data.user,tenantid", 3, 705902803),
    ("é", 2, -1799598169),
])
def test_the_hash_is_sparks(spec: str, shard: int, expected: int) -> None:
    assert spark_hash(spec, shard) == expected


def test_shards_numbered_from_zero_can_all_land_on_one_task() -> None:
    # What a balanced layout is for: Spark sent 7 of the bench's 8 groups to one task.
    assert Counter(partition_of("data.user", shard, 2) for shard in range(8)) == {0: 7, 1: 1}


@pytest.mark.parametrize("spec", ["", "data.user", "data.user,tenantid", "type"])
@pytest.mark.parametrize(("shards", "partitions"), [(8, 2), (5, 2), (6, 4), (3, 8)])
def test_balanced_values_give_every_task_its_share(spec: str, shards: int, partitions: int) -> None:
    values = shard_values(spec, shards, partitions)
    assert len(set(values)) == shards
    counts = Counter(partition_of(spec, value, partitions) for value in values)
    assert max(counts.values()) - min(counts.get(p, 0) for p in range(partitions)) <= 1
    assert shard_values(spec, shards, partitions) == values  # the same on every start


def test_an_unbalanced_layout_numbers_from_zero() -> None:
    assert ShardLayout(4, 2, balanced=False).values("data.user") == (0, 1, 2, 3)


def test_a_fresh_checkpoint_records_the_configured_layout(tmp_path: Path) -> None:
    checkpoint = tmp_path / "rules"
    assert checkpoint_layout(checkpoint, ShardLayout(8, 2), ShardLayout(64, 2, balanced=False)) == ShardLayout(8, 2)
    # Later starts keep it, whatever the settings say then.
    assert checkpoint_layout(checkpoint, ShardLayout(16, 2), ShardLayout(64, 2, balanced=False)) == ShardLayout(8, 2)
    assert [path.name for path in checkpoint.iterdir()] == [LAYOUT_FILE]


def test_a_checkpoint_written_before_layouts_keeps_the_legacy_one(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    legacy = ShardLayout(64, 2, balanced=False)
    assert checkpoint_layout(tmp_path, ShardLayout(8, 2), legacy) == legacy
    assert not (tmp_path / LAYOUT_FILE).exists()


def test_a_checkpoint_keeps_its_values_when_the_partition_count_changes(tmp_path: Path) -> None:
    # Spark keeps a stateful query at its checkpoint's shuffle partitions; so must the values,
    # or a key's rows would go to a group that does not hold its state.
    legacy = ShardLayout(64, 2, balanced=False)
    started = checkpoint_layout(tmp_path, ShardLayout(8, 2), legacy)
    restarted = checkpoint_layout(tmp_path, ShardLayout(8, 4), legacy)
    assert restarted == started
    assert restarted.values("data.user") == shard_values("data.user", 8, 2) != shard_values("data.user", 8, 4)


def test_a_record_without_a_partition_count_takes_the_configured_one(tmp_path: Path) -> None:
    (tmp_path / LAYOUT_FILE).write_text('{"shards": 8, "balanced": true}')
    assert checkpoint_layout(tmp_path, ShardLayout(16, 2), ShardLayout(64, 2, balanced=False)) == ShardLayout(8, 2)
