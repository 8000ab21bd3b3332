"""The kinds of collector, one folder each, installed here: adding a kind is adding its folder and one line below.

A kind's folder (`blobgc/kinds/pastes/`, say) holds its key layouts and the drain's guards (`layouts.py`),
its planner and executor, its statements (`sql/`), and its `KIND`: what the shared machinery (the outbox,
reconcile, the privilege check, the reclaim figures) needs to know of it. Importing any kind imports this
package first, so every kind is installed before any layout is asked for.
"""

from __future__ import annotations

from blobgc.core import registry
from blobgc.kinds import blobs, generations, images, media, pastes

KINDS = (
    blobs.KIND,
    pastes.KIND,
    images.KIND,
    generations.KIND,
    media.KIND,
)
registry.install(KINDS)
