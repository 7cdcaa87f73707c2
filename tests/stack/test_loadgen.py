import orjson

from wayline.stack import loadgen


def test_a_topic_per_domain_by_default() -> None:
    assert len(loadgen.topics("p.")) == len(loadgen.DOMAINS)
    assert {t.topic.removeprefix("p.") for t in loadgen.catalog("p.")} == set(loadgen.DOMAINS)


def test_the_ingest_layout_puts_every_type_on_one_topic() -> None:
    assert loadgen.topics("p.", layout="ingest") == ["p.ingest"]
    records = list(loadgen.EventFactory(topic_prefix="p.", layout="ingest", seed=3).records(200))
    assert {r.topic for r in records} == {"p.ingest"}


def test_the_types_layout_gives_each_of_the_500_types_a_topic() -> None:
    topics = loadgen.topics("p.", layout="types")
    assert len(topics) == 500 and "p.billing.invoice.created" in topics
    assert len(loadgen.topics("p.")) == 20
    records = list(loadgen.EventFactory(topic_prefix="p.", layout="types", seed=3).records(200))
    assert all(r.topic == "p." + orjson.loads(r.value)["type"].removeprefix("com.wayline.") for r in records)
    # The same event types as the per-domain layout: only where they are written changes.
    types = {orjson.loads(r.value)["type"] for r in records}
    assert types <= {t.name for t in loadgen.catalog()} and len(types) > 50
