"""Reconciliation: prove that every audited (expected) id arrived on the actual side.

- ``periods``         the four periods and the metric windows
- ``state``           the reconciler of one bucket of ids (missing, found, duplicates, late and
                      too-late records, the stalled watermark), as plain Python that the job wraps
- ``figures``         what it reports: the figures per (source, window), the ids missing or found
- ``packing``         records packed per (reconciliation, bucket) before the reconciler's shuffle
- ``events``          the CloudEvents it emits
- ``reconciliation``  reconciliations in the registry: the expected and actual sides, the periods
- ``store``           the figures, watermarks and missing ids in PostgreSQL
- ``metrics``         the Prometheus view of the stored figures
- ``self_audit``      the delivery self-audit, a reconciliation Wayline keeps for itself

This package re-exports nothing: import the module that defines a name (``state`` and
``packing`` load numpy, pandas and pyarrow; the rest do not).
"""
