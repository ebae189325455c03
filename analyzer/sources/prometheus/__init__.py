"""``PrometheusSource`` split by query round: ``batch`` (queries side by side), ``discovery``,
``snapshot`` (with ``kubernetes`` and ``union``), ``spans`` (closer looks) and ``raw`` (plots,
memory, instant values); ``source`` ties them into one ``MetricsSource``."""

from __future__ import annotations

import logging

# Every round logs under the name the source always had: operators' log filters and tests name it.
log = logging.getLogger(__name__)  # "analyzer.sources.prometheus": every query round logs as one
