"""Shadow mode: the wire format a live cluster and a shadowed policy exchange
(`schemas`), and the durable append-only log of what was asked, answered and observed
(`spool`). Both are plain data code: no torch, no web framework, no warehouse."""
