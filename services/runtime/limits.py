"""Bounds of the wire that every service checks the same way."""
from __future__ import annotations

# A session id, in UTF-8 bytes. The gateway's --max-session-id may be lower, never higher: the
# services behind it refuse longer ones.
MAX_SESSION_ID_BYTES = 256
