"""Independent safety supervisor: joint limits, fail-closed limiting, watchdog and e-stop.

Imports nothing from the rest of omni_vla (runtime, policies, sim): it must keep
working when everything else has failed.
"""
