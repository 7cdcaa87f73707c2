import orjson

from wayline.stack import loadgen


def test_a_topic_per_domain_by_default() -> None:
    assert len(loadgen.topics("p.")) == len(loadgen.DOMAINS)
    assert {t.topic.removeprefix("p.") for t in loadgen.catalog("p.")} == set(loadgen.DOMAINS)


def test_the_ingest_layout_puts_every_type_on_one_topic() -> None:
    assert loadgen.topics("p.", ingest=True) == ["p.ingest"]
    records = list(loadgen.EventFactory(topic_prefix="p.", ingest=True, seed=3).records(200))
    assert {r.topic for r in records} == {"p.ingest"}
    # The same event types as the per-domain layout: only where they are written changes.
    types = {orjson.loads(r.value)["type"] for r in records}
    assert types <= {t.name for t in loadgen.catalog()} and len(types) > 50
