"""Reading every datagram waiting on a socket: :func:`drain`, the one
receive loop of the UDP listeners (the agents' heartbeat and their
requests, fence_kdump, the simulated agents' request socket).

A listener waits until its socket is readable, then drains it: reads
until the kernel has nothing more (one wake-up per burst, not per
datagram) and hands each datagram to its handler (:func:`drain`), or
takes what waits as one batch (:func:`receive`). A handler's exception
is reported and the next datagram read (one bad datagram must not stop
a listener); an error of the socket itself ends the drain (the caller
waits for the socket again).
"""

#: What :func:`drain`'s ``failed`` is told went wrong.
RECEIVE = "receive"
HANDLE = "handle"


def drain(sock, size, handle, failed, limit=None):
    """Hand each datagram waiting on the non-blocking ``sock`` (at most
    ``size`` bytes read of each) to ``handle(data, sender)`` until none
    is left, or ``limit`` were read; return how many were read.

    ``failed(stage, exc)`` is called inside the ``except`` block (so
    ``log.exception`` shows the traceback) when ``sock.recvfrom`` raised
    an OSError (``stage`` is :data:`RECEIVE`; the drain ends) or
    ``handle`` raised an Exception (:data:`HANDLE`; the drain goes on).
    """
    count = 0
    for data, sender in _waiting(sock, size, failed, limit):
        count += 1
        try:
            handle(data, sender)
        except Exception as e:   # noqa: BLE001 - the listener lives on
            failed(HANDLE, e)
    return count


def receive(sock, size, failed, limit):
    """[(data, sender)]: the datagrams waiting on the non-blocking
    ``sock``, at most ``limit``, read all at once for a caller that
    handles them as one batch; ``failed`` as :func:`drain`'s (only
    :data:`RECEIVE`)."""
    return list(_waiting(sock, size, failed, limit))


def _waiting(sock, size, failed, limit):
    recvfrom = sock.recvfrom
    count = 0
    while limit is None or count < limit:
        try:
            item = recvfrom(size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            failed(RECEIVE, e)
            return
        count += 1
        yield item
