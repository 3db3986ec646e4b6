"""Who may call what: TLS certificates, peer identities and the role rules
every gRPC server enforces (docs/security.md)."""
