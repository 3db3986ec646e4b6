"""The TaskManager side of the connector API (docs/connectors.md): a connector source's
reader as the head of a task's chain, a connector sink's writer and committer as its end."""
