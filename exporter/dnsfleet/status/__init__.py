"""The status page at ``/``: what it keeps of each scrape (:mod:`.facts`) and how it is
rendered (:mod:`.page`)."""
