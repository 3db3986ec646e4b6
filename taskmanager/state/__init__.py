"""Keyed user state and timers of process functions: pure cores, no Spark, no clock (time is
an argument). `keyed_state.py` holds each named state per key with its time-to-live;
`timer_service.py` orders each key's event- and processing-time timers. The operator that
uses them is taskmanager/operators/keyed_process.py."""
