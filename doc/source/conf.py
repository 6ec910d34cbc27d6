# Sphinx configuration for instanceha's documentation (tox -e docs).
#
# The pages themselves are the Markdown files in doc/ (doc/*.md), which
# tests, the README and the code refer to by path; doc/source/<name>.md is
# a one-line MyST include of each, so there is one copy of every text.
# Build offline: no extension here fetches anything at build time.

import re

project = 'instanceha'
copyright = 'instanceha developers'
author = 'instanceha developers'

extensions = [
    'myst_parser',
    'sphinxcontrib.mermaid',
    'oslo_config.sphinxext',
    'oslo_policy.sphinxext',
]

source_suffix = {
    '.rst': 'restructuredtext',
    '.md': 'markdown',
}
root_doc = 'index'
exclude_patterns = ['_build']

# Links such as [safety](safety.md#when-a-fact-is-not-proven) between the
# Markdown pages resolve to the include stubs of the same name.
myst_heading_anchors = 4
# A link in doc/*.md that leaves doc/ (../devstack/README.md) is made
# relative to the Markdown file by each stub's include :relative-docs: ../;
# see _links_out_of_doc below for a Markdown file out there.
# Bare links are looked up in the standard domain only: the oslo.config
# domain fails on a target it does not know instead of declining it.
myst_ref_domains = ['std']
myst_enable_extensions = ['colon_fence']
# ```mermaid fences (doc/states.md) are rendered by sphinxcontrib-mermaid:
# the page loads mermaid.js when viewed; without it the diagram shows as
# its source text.
myst_fence_as_directive = ['mermaid']


html_theme = 'alabaster'
html_title = 'instanceha'
html_theme_options = {
    'description': 'Instance high availability for OpenStack Nova',
    'fixed_sidebar': True,
}
pygments_style = 'sphinx'


# A Markdown file outside doc/ (devstack/README.md) is no page of this
# tree; MyST would look a link to it up as a document and warn. Such links
# are served as a download of the file instead ("path:" links), so the
# Markdown stays as it reads on a forge.
_OUT_OF_DOC_MD = re.compile(r'\]\((\.\./[^)\s#]+\.md)(?:#[^)\s]*)?\)')


def _links_out_of_doc(app, relative_path, parent_docname, content):
    content[0] = _OUT_OF_DOC_MD.sub(r'](path:\1)', content[0])


def setup(app):
    app.connect('include-read', _links_out_of_doc)
