from wayline.recon.events import FOUND_TYPE, METRICS_TYPE, MISSING_TYPE, completeness, id_event, metrics_event
from wayline.recon.figures import Emitted

T = 1_772_355_600_000  # 2026-03-01T09:00:00Z


def test_missing_and_found_events_name_the_id_and_keep_their_ids_on_a_replay() -> None:
    missing = id_event("rec_1", "orders", "wayline", Emitted("missing", "e-7", "shop", T, None, T + 20_000))
    found = id_event("rec_1", "orders", "wayline", Emitted("found", "e-7", "shop", T, T + 30_000, T + 40_000))
    assert (missing["type"], missing["subject"], missing["source"], missing["time"]) == (
        MISSING_TYPE, "e-7", "wayline/recon/orders", "2026-03-01T09:00:00.000Z")
    assert missing["data"] == {"reconciliation_id": "rec_1", "id": "e-7", "source": "shop",
                               "expected_time": "2026-03-01T09:00:00.000Z", "watermark": "2026-03-01T09:00:20.000Z"}
    assert (found["type"], found["data"]["actual_time"]) == (FOUND_TYPE, "2026-03-01T09:00:30.000Z")
    assert missing["id"] != found["id"]
    assert missing == id_event("rec_1", "orders", "wayline", Emitted("missing", "e-7", "shop", T, None, T + 20_000))


def test_a_metrics_event_carries_its_revision_and_each_revision_its_own_id() -> None:
    figures = {"source": "shop", "window_start": T, "window_end": T + 60_000, "revision": 1, "expected": 4,
               "matched": 3, "missing": 1, "found": 0, "duplicates": 2, "late": 0, "too_late": 0, "unreadable": 1}
    first = metrics_event("rec_1", "orders", "wayline", figures)
    second = metrics_event("rec_1", "orders", "wayline", {**figures, "revision": 2, "matched": 4, "missing": 0})
    assert (first["type"], first["subject"]) == (METRICS_TYPE, "shop/2026-03-01T09:00:00.000Z")
    assert (first["data"]["completeness"], first["data"]["revision"], first["data"]["unreadable"]) == (75.0, 1, 1)
    assert (second["data"]["completeness"], second["data"]["revision"]) == (100.0, 2)
    assert first["id"] != second["id"]


def test_completeness_of_an_empty_window_is_full() -> None:
    assert (completeness(0, 0), completeness(3, 1)) == (100.0, 33.333)
