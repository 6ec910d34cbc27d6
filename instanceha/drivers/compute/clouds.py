"""The clouds.yaml ``[DEFAULT] clouds_file`` names, checked without
openstacksdk (cheap enough for the start-up checks and ``instanceha
check``): one line naming the file and what to do."""

import os

import yaml


def clouds_file_problem(conf):
    """One line when ``[DEFAULT] clouds_file`` cannot give ``[DEFAULT]
    cloud`` (no such file, unreadable, not YAML, the cloud not in it),
    else None. Reads the file only; unset: None (openstacksdk searches
    its usual places)."""
    path = conf.clouds_file
    if not path:
        return None
    where = "[DEFAULT] clouds_file %s" % path
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except IsADirectoryError:
        return "%s: is a directory: give the clouds.yaml file" % where
    except FileNotFoundError:
        return ("%s: no such file: create it (cloud %r, see doc/"
                "operators.md) or fix the path" % (where, conf.cloud))
    except PermissionError:
        return ("%s: permission denied: make it readable by the service's "
                "user (this process runs as uid %d)" % (where, os.geteuid()))
    except OSError as e:
        return "%s: cannot read it: %s" % (where, e.strerror or e)
    except (yaml.YAMLError, ValueError, UnicodeDecodeError) as e:
        return "%s: not valid YAML: %s" % (where, " ".join(str(e).split()))
    clouds = data.get("clouds") if isinstance(data, dict) else None
    if not isinstance(clouds, dict) or conf.cloud not in clouds:
        return ("%s: no cloud %r in it (it has %s): set [DEFAULT] cloud to "
                "one of them or add it" % (
                    where, conf.cloud,
                    ", ".join(sorted(map(str, clouds))) if
                    isinstance(clouds, dict) and clouds else "none"))
    return None
