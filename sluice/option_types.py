"""The value types of the process options (sluice/process_options.py): each parses a value from
a flag, a variable, a configuration file or a default, and raises ValueError saying what was
expected."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from sluice import units
from sluice.states import AclMode

# Value of rpc.advertised-host meaning "the IP address this host name resolves to"
# (a container's own address in docker-compose, where replicas have no stable name).
AUTO_HOST = "auto"


def as_text(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        raise ValueError(f"expected a string, got {value!r}")
    text = str(value).strip()
    if not text:
        raise ValueError("expected a non-empty string")
    return text


def string(value: Any) -> str:
    return as_text(value)


def host(value: Any) -> str:
    host = as_text(value)
    if any(c.isspace() for c in host) or "/" in host:
        raise ValueError(f"expected a host name or IP address, got {host!r}")
    if host.startswith("["):
        if not host.endswith("]") or "]" in host[:-1]:
            raise ValueError(f"expected a bracketed IPv6 address such as [::], got {host!r}")
    elif host.count(":") == 1:
        raise ValueError(f"expected a host without a port, got {host!r} (the port is rpc.port)")
    elif ":" in host:
        try:
            return f"[{ipaddress.IPv6Address(host)}]"  # e.g. a pod IP from the downward API
        except ValueError:
            raise ValueError(f"expected a host name or IP address, got {host!r}") from None
    return host


def integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    raise ValueError(f"expected an integer, got {value!r}")


def port(value: Any) -> int:
    try:
        port = integer(value)
    except ValueError:
        raise ValueError(f"expected an integer port 0-65535, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"expected an integer port 0-65535, got {port}")
    return port


def positive_int(value: Any) -> int:
    n = integer(value)
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def positive_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        x = float(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if not x > 0 or x == float("inf"):
        raise ValueError(f"must be a positive number, got {value!r}")
    return x


def seconds(value: Any) -> float:
    """A positive duration: 6, 6s, 500ms, 2min (a bare number is seconds)."""
    return units.parse_duration(value, "s", positive=True)


def duration(value: Any) -> float:
    """A non-negative duration (0 allowed): 0, 30s, 500ms (a bare number is seconds)."""
    return units.parse_duration(value, "s")


def quorum(value: Any) -> str:
    """host[:port][,host[:port]...][/chroot], as kazoo takes it."""
    text = as_text(value)
    hosts, _, chroot = text.partition("/")
    if chroot and not re.fullmatch(r"[^\s/]+(/[^\s/]+)*", chroot):
        raise ValueError(f"bad chroot /{chroot} in {text!r}")
    for entry in hosts.split(","):
        entry = entry.strip()
        host, sep, port = entry.rpartition(":") if ":" in entry and not entry.endswith("]") else (entry, "", "")
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"expected host:port[,host:port...], got {text!r}")
        if sep and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"bad port {port!r} in {text!r}")
    return text


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def advertised_host(value: Any) -> str:
    text = as_text(value)
    return AUTO_HOST if text.lower() == AUTO_HOST else host(text)


def zk_acl(value: Any) -> str:
    """high-availability.zookeeper.client.acl: creator | open (Flink's values)."""
    text = as_text(value).lower()
    if text not in tuple(AclMode):
        raise ValueError(f"expected {' or '.join(AclMode)}, got {value!r}")
    return text


def umask(value: Any) -> str:
    """process.umask: an octal file mode mask, e.g. 077 (0077 and 0o077 too), as three digits."""
    text = as_text(value).lower().removeprefix("0o")
    if not re.fullmatch(r"[0-7]{1,4}", text) or int(text, 8) > 0o777:
        raise ValueError(f"expected an octal mask such as 077 or 022, got {value!r}")
    return f"{int(text, 8):03o}"


def host_names(value: Any) -> str:
    """rest.allowed-hosts: `*`, or host names and addresses separated by commas (no ports)."""
    names = [n.strip().lower() for n in as_text(value).split(",") if n.strip()]
    if names == ["*"]:
        return "*"
    if not names:
        raise ValueError("expected * or host names separated by commas")
    for name in names:
        if not re.fullmatch(r"[a-z0-9._-]{1,253}|\[[0-9a-f:.]+\]", name):
            raise ValueError(f"{name!r}: expected a host name or address without a port ([::1] for IPv6)")
    return ",".join(names)
