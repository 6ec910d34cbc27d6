"""A machine's system UUID in one text form, wherever it was read.

The host's agent reads it as text (DMI product_uuid, SMBIOS order), a
Redfish BMC shows it as text (the System's ``UUID``), an IPMI BMC sends
16 bytes (Get System GUID) in one of several byte orders
(:func:`instanceha.drivers.fencing.base.uuid_forms` lists the readings).
Comparisons are made on :func:`canonical` forms only.
"""

import uuid


def canonical(text):
    """``text`` (a str or uuid.UUID) as a UUID in canonical form (lower
    case, hyphens; braces, ``urn:uuid:`` and case ignored), or None when
    it is not one, or is all zeros or all ones (what firmware shows when
    it has no UUID)."""
    try:
        value = text if isinstance(text, uuid.UUID) else \
            uuid.UUID(str(text).strip())
    except (ValueError, TypeError, AttributeError):
        return None
    if value.int in (0, (1 << 128) - 1):
        return None
    return str(value)
