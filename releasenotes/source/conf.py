# Sphinx configuration for instanceha's release notes (tox -e releasenotes).
# The notes are the YAML files in releasenotes/notes/, written with
# `reno new SLUG` and collected from git history by reno's Sphinx extension:
# a note appears once it is committed.

project = 'instanceha Release Notes'
copyright = 'instanceha developers'
author = 'instanceha developers'

extensions = ['reno.sphinxext']

root_doc = 'index'
exclude_patterns = ['_build']

html_theme = 'alabaster'
html_title = 'instanceha Release Notes'
pygments_style = 'sphinx'
