"""``pod_view``: lookups resolved as a pod's libc resolves them, from the pod's resolv.conf."""

from __future__ import annotations

from dataclasses import dataclass, field

from dnsfleet.config.checks import Choice, Duration, ListOf, Section, key, read_keys
from dnsfleet.config.concepts import AbsolutePath, DnsName
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

LIBCS: tuple[str, ...] = ("glibc", "musl")
MAX_NAMES = 10  # each name is a label value and a lookup per scrape


@dataclass(frozen=True)
class PodView:
    """A pod's resolv.conf, the names its application looks up, and its libc."""

    resolv_conf: str = field(
        metadata=key(
            AbsolutePath(),
            doc="The pod's resolv.conf as the node sees it, read through --path.rootfs "
            "(containerd: /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/<id>/"
            "resolv.conf)",
        )
    )
    names: tuple[str, ...] = field(
        metadata=key(
            ListOf(DnsName()),
            doc="Names as the application writes them (relative names walk the search list)",
        )
    )
    libc: str = field(
        default="glibc",
        metadata=key(
            Choice(LIBCS), doc="Whose walk: glibc (Debian, Ubuntu, distroless) or musl (Alpine)"
        ),
    )
    budget: float = field(
        default=30.0,
        metadata=key(
            Duration(maximum=300),
            doc="The longest a lookup is followed (the scrape deadline too); beyond it the "
            "lookup counts as cut short",
        ),
    )


def _parse_pod_view_entry(node: Node) -> PodView:
    f = node.fields()
    view = PodView(**read_keys(f, PodView))
    f.done()
    if not view.names:
        raise node.child("names").error("no name to look up: list what the pod's application asks")
    if len(view.names) > MAX_NAMES:
        raise node.child("names").error(f"{len(view.names)} names: at most {MAX_NAMES}")
    return view


def _parse_pod_view(node: Node) -> tuple[PodView, ...]:
    out: list[PodView] = []
    for i, item in enumerate(node.sequence()):
        view = _parse_pod_view_entry(item)
        if any(v.resolv_conf == view.resolv_conf and v.libc == view.libc for v in out):
            raise node.child(i).error(
                f"resolv.conf {quote(view.resolv_conf)} with libc {view.libc} is listed twice"
            )
        out.append(view)
    return tuple(out)


POD_VIEW_KEY = key(
    ListOf(Section(PodView, _parse_pod_view_entry), whole=_parse_pod_view),
    doc="Pods' resolv.conf files: each name resolved as the pod's libc walks it",
)
