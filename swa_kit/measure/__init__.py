"""Tools that measure: the probe, the key gap, the trace, the audit, the benchmark, the doctor.

Where new work goes:

* measuring which keys a kernel really attends: ``swa_kit/measure/probe.py``
* a finding of ``swa-kit audit``: ``swa_kit/measure/audit.py``, ranked by severity, with its way out
* what the doctor reports about a machine: ``swa_kit/measure/doctor.py`` (detection itself is
  ``swa_kit/machine.py``)
"""
