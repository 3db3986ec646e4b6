"""The JobManager side of connector sources: split enumerators and their assignments."""
