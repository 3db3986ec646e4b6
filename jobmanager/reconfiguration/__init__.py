"""Live reconfiguration of a running job (docs/reconfiguration.md): what changes (plan.py)
and the protocol that changes it at one barrier (protocol.py), both pure."""
