"""What the UDP listeners (fence_kdump, the agents' heartbeat) share:
reading a sender's address the same way, and binding a datagram socket
to one configured address."""

import ipaddress
import socket


def normalise_address(address: str) -> str:
    """Canonical text of an IP address; IPv4-mapped IPv6 becomes IPv4, a
    zone (``%eth0``) is left out. Raises ValueError for a non-address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def bind(address: str, port: int) -> socket.socket:
    """A UDP socket bound to ``address`` (an IPv4 or IPv6 address or a
    host name the system resolves) and ``port`` (0: a free one). An IPv6
    socket also takes IPv4-mapped traffic. Raises OSError (the caller
    names the address in its start-up error)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((address, port))
    except BaseException:
        sock.close()
        raise
    return sock
