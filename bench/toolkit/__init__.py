"""What the benchmarks share; each script in ``bench/`` is one benchmark, with its own
``main``, and imports from here, never from another benchmark.

A script runs as ``python bench/NAME.py``, so ``bench/`` is first on ``sys.path`` and this
package imports as ``toolkit``. Each module imports only what its concept needs, so that
``rules_flink.py`` (in a virtualenv with PyFlink and nothing of Wayline's) and
``delivery_http_clients.py`` (in a scratch one) can use the light ones:

- ``cli``: the argument parser every benchmark starts from (``--runs``, ``--out``), list
  types, and the delivery flags that several share;
- ``results``: the machine's facts, the results file, a markdown table;
- ``stats``: quantiles, one definition for every figure;
- ``waiting``: waiting on a condition, on arrivals that may stall, on a query to start;
- ``stack``: a fresh Kafka and PostgreSQL, and ``wayline`` commands as processes;
- ``receiver``: receivers in processes of their own, the signature-checking one above all;
- ``produce``: sending to Kafka, paced or all at once;
- ``topics``: reading a topic back;
- ``processes``: memory and CPU of process trees, sampled;
- ``plain_sender``: the plain app a platform team would write instead of Wayline;
- ``systems``: the delivery systems the delivery benchmarks start, feed and count;
- ``rules_mix``: the rules benchmarks' stream and rule mixes.
"""
