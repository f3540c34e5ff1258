"""The pod view: a lookup resolved the way a pod's libc resolves it, from the pod's own
resolv.conf: the walk over the search list (``walk``, pure) and the lookup against the
real nameservers (``driver``)."""
