"""Host latency tuning: the host facts that decide a resolver's latency (`$device`)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.gen.vocabulary import (
    RATE,
    SEL,
    Panel,
    base,
    heat,
    query,
    tab,
    ts,
    variables,
    with_panels,
)

DEVICE = f'{SEL}, device=~"$device"'


def host_latency() -> dash.Dashboard:
    d = base(
        "dnsfleet-host",
        "dnsfleet / Host latency tuning",
        "The host facts that decide whether a resolver answers in microseconds or "
        "milliseconds: NIC queue interrupts per CPU, IRQ affinity, CPU wake-up latency, "
        "governor, bonding.",
    )
    d = variables(d, device=True)
    return with_panels(d, _nic_interrupts(), _irq_spread(), _cpu_power(), _bonding(), _conntrack())


def _nic_interrupts() -> list[Panel]:
    """Where the selected NICs' queue interrupts land."""
    return [
        heat(
            "NIC interrupts per CPU",
            "Interrupts per second each CPU takes "
            "for the selected NICs' queues: one hot row is an imbalance, a "
            "single row an affinity collapse.",
            "short",
            query(
                f"sum by (cpu) (rate(dnsfleet_nic_cpu_interrupts_total{{{DEVICE}}}{RATE}))",
                "{{cpu}}",
            ),
        ),
        ts(
            "Interrupt imbalance",
            "Busiest CPU's interrupt rate over the mean of "
            "the CPUs serving the NIC (1 = even; DNSNicQueueImbalance).",
            "short",
            query(
                f"max by (instance, device) (rate(dnsfleet_nic_cpu_interrupts_"
                f"total{{{DEVICE}}}{RATE})) / avg by (instance, device) (rate("
                f"dnsfleet_nic_cpu_interrupts_total{{{DEVICE}}}{RATE}) > 0)",
                "{{instance}} {{device}}",
            ),
        ),
        ts(
            "CPUs serving NIC interrupts",
            "Distinct CPUs that effectively serve "
            "a NIC's queue interrupts, against its queue count "
            "(DNSNicIrqAffinityCollapsed when 1).",
            "short",
            query(f"dnsfleet_nic_irq_cpus{{{DEVICE}}}", "{{instance}} {{device}} cpus"),
            query(f"dnsfleet_nic_queues{{{DEVICE}}}", "{{instance}} {{device}} queues"),
        ),
    ]


def _irq_spread() -> list[Panel]:
    """Queue affinity, receive softirqs and irqbalance."""
    return [
        ts(
            "Queue affinity width",
            "CPUs each queue's IRQ may be delivered to (smp_affinity_list).",
            "short",
            query(f"dnsfleet_nic_queue_affinity_cpus{{{DEVICE}}}", "{{device}} {{queue}}"),
        ),
        ts(
            "NET_RX softirqs per CPU",
            "Receive softirqs per second per CPU (/proc/softirqs).",
            "short",
            query(
                f"sum by (instance, cpu) (rate(dnsfleet_softirq_net_rx_total{{{SEL}}}{RATE}))",
                "{{instance}} cpu{{cpu}}",
            ),
        ),
        ts(
            "irqbalance running",
            "1 when an irqbalance process runs on the host.",
            "bool_yes_no",
            query(f"dnsfleet_irqbalance_running{{{SEL}}}", "{{instance}}"),
            min_val=0,
            max_val=1,
        ),
    ]


def _cpu_power() -> list[Panel]:
    """CPU wake-up latency, idle states, governor and tuned."""
    return [
        ts(
            "CPU wake-up latency",
            "Worst exit latency a CPU can incur now "
            "(deepest enabled idle state the PM QoS limit allows) against the "
            "PM QoS limit (DNSCpuLatencyDrift above the 20 µs budget).",
            "s",
            query(f"dnsfleet_cpu_wakeup_latency_seconds{{{SEL}}}", "{{instance}} wake-up"),
            query(
                f"dnsfleet_pm_qos_cpu_latency_seconds{{{SEL}}} < 2000",
                "{{instance}} PM QoS limit",
            ),
        ),
        ts(
            "Idle state residency",
            "Seconds per second all CPUs spent in each "
            "idle state (deep states add wake-up latency).",
            "s",
            query(
                f"sum by (instance, state) (rate(dnsfleet_cpuidle_state_"
                f"residency_seconds_total{{{SEL}}}{RATE}))",
                "{{instance}} {{state}}",
            ),
            stack=True,
        ),
        ts(
            "Scaling governor",
            "CPUs per cpufreq governor (latency-sensitive resolvers want performance).",
            "short",
            query(f"dnsfleet_cpu_scaling_governor_cpus{{{SEL}}}", "{{instance}} {{governor}}"),
        ),
        tab(
            "Tuned profile and idle driver",
            "Active tuned profile and cpuidle driver/governor per host.",
            "none",
            query(
                f"dnsfleet_tuned_profile_info{{{SEL}}} or dnsfleet_cpuidle_driver_info{{{SEL}}}",
                instant=True,
                fmt="table",
            ),
        ),
    ]


def _bonding() -> list[Panel]:
    """Bond slaves, link failures and link monitoring."""
    return [
        ts(
            "Bond slaves up",
            "Slaves up against configured slaves per bond (DNSBondDegraded).",
            "short",
            query(f"dnsfleet_bond_slaves_up{{{SEL}}}", "{{instance}} {{bond}} up"),
            query(f"dnsfleet_bond_slaves{{{SEL}}}", "{{instance}} {{bond}} slaves"),
        ),
        ts(
            "Bond link failures",
            "Link failures per slave in the last 30m (DNSBondLinkFlapping at 3).",
            "short",
            query(
                f"increase(dnsfleet_bond_slave_link_failures_total{{{SEL}}}[30m])",
                "{{instance}} {{bond}} {{slave}}",
            ),
        ),
        tab(
            "Bond active slave and link monitoring",
            "Active slave per bond and "
            "its link monitoring interval (0 = none: DNSBondNoLinkMonitoring).",
            "s",
            query(
                f"dnsfleet_bond_active_slave_info{{{SEL}}} or "
                f"dnsfleet_bond_link_monitoring_interval_seconds{{{SEL}}}",
                instant=True,
                fmt="table",
            ),
        ),
    ]


def _conntrack() -> list[Panel]:
    """Connection tracking losses beside the probe timeouts they explain, and table fill."""
    return [
        ts(
            "Conntrack losses and DNS timeouts",
            "Failed inserts, drops and early drops per second (DNSConntrackDropping) beside "
            "probe timeouts per second: a UDP query whose conntrack entry was not inserted "
            "is dropped, and its client waits out its timeout.",
            "short",
            query(
                f"rate(dnsfleet_conntrack_insert_failed_total{{{SEL}}}{RATE})",
                "{{instance}} insert_failed",
            ),
            query(f"rate(dnsfleet_conntrack_drops_total{{{SEL}}}{RATE})", "{{instance}} drop"),
            query(
                f"rate(dnsfleet_conntrack_early_drops_total{{{SEL}}}{RATE})",
                "{{instance}} early_drop",
            ),
            # A timeouts series exists once a target has timed out: an exporter whose
            # probes never did draws 0 (the `or`), beside its conntrack drops.
            query(
                f'sum by (instance) (rate(dnsfleet_probe_failures_total{{{SEL}, reason="timeout"}}'
                f"{RATE})) or sum by (instance) (rate(dnsfleet_probe_attempts_total{{{SEL}}}"
                f"{RATE})) * 0",
                "{{instance}} probe timeouts",
            ),
        ),
        ts(
            "Conntrack table fill",
            "Entries over nf_conntrack_max (DNSConntrackDropping above 0.9).",
            "percentunit",
            query(
                f"dnsfleet_conntrack_entries{{{SEL}}} / dnsfleet_conntrack_entries_limit{{{SEL}}}",
                "{{instance}}",
            ),
            min_val=0,
            max_val=1,
        ),
    ]
