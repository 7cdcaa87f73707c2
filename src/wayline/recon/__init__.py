"""Reconciliation: prove that every audited (expected) id arrived on the actual side.

``periods`` holds the four periods and the metric windows; ``state`` the reconciler of
one bucket of ids (missing, found, duplicates, late and too-late records, the stalled
watermark), as plain Python that the job wraps; ``events`` the CloudEvents it emits.
"""

from wayline.recon.periods import Periods, window_start
from wayline.recon.state import Bucket, Counts, Emitted, Record

__all__ = ["Bucket", "Counts", "Emitted", "Periods", "Record", "window_start"]
