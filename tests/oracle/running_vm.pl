#!/usr/bin/perl
# The harness's own preamble for the PVE oracle: runs ../shared/pve-oracle's oracle.pl, unmodified,
# with the VM running. The oracle fakes a VM that never runs (its OracleEnv::setup mocks
# PVE::QemuServer::check_running to undef), so update_vm_api always takes
# vmconfig_apply_pending. Here, after that setup, check_running answers a pid, so an update
# takes vmconfig_hotplug_pending, and what that path asks of QEMU, the host and systemd is
# answered as a QEMU that accepts every device command would answer it. Nothing of PVE's is
# copied: only the calls below the decisions are replaced, in memory, for this process.
#
#     perl tests/oracle/running_vm.pl ORACLE_DIR/oracle.pl   (with the oracle's PERL5LIB)
#
# What this fakes, and so what the running-VM scenarios cannot tell (tests/oracle/diff.py
# lists it, `RUNNING_FAKES`):
#  * QEMU 9.2.0 is running and every device_add/device_del (vm_deviceplug, vm_deviceunplug),
#    link change (qemu_set_link_status), medium change (Blockdev change_medium), I/O throttle
#    (Blockdev set_io_throttle) and `balloon` succeeds; tap devices plug and unplug
#    (Network tap_plug, tap_unplug, tap_rate_limit) and systemd takes CPU weights and quotas
#    (Systemd systemd_call, which QemuServer/CGroup.pm's set_unit_properties calls).
#  * No other QMP command is answered (mon_cmd dies "harness: no QMP answer for …"), so CPU and
#    memory hotplug (qemu_cpu_hotplug's query-cpus-fast, qemu_memory_hotplug's dimms) fail with
#    that message: they need a QEMU that keeps state, which this is not.

use strict;
use warnings;

use Test::MockModule;

my $oracle = shift @ARGV or die "usage: $0 ORACLE_DIR/oracle.pl\n";
(my $oracle_lib = $oracle) =~ s{[^/]+$}{lib};
unshift @INC, $oracle_lib;

require OracleEnv;

my @mocks;

sub replace {
    my ($package, %subs) = @_;
    my $mock = Test::MockModule->new($package, no_auto => 1);
    for my $name (sort keys %subs) {
        $mock->redefine($name, $subs{$name});
    }
    push @mocks, $mock;
}

sub running_vm {
    no warnings 'once';
    my $ok = sub { return 1; };
    my $nothing = sub { return; };
    my $qmp = sub {
        my ($vmid, $command) = @_;
        return if $command eq 'balloon';
        die "harness: no QMP answer for '$command' (tests/oracle/running_vm.pl)\n";
    };
    replace(
        'PVE::QemuServer',
        check_running => sub { return 4242; },
        vm_deviceplug => $ok,
        vm_deviceunplug => $ok,
        qemu_set_link_status => $nothing,
        get_running_qemu_version => sub { return $OracleEnv::KVM_VERSION // '9.2.0'; },
        mon_cmd => $qmp,
    );
    replace('PVE::QemuServer::Monitor', mon_cmd => $qmp);
    replace('PVE::QemuServer::Helpers', vm_running_locally => sub { return 4242; });
    replace('PVE::QemuServer::Blockdev', change_medium => $nothing, set_io_throttle => $nothing);
    replace('PVE::QemuServer::Network', tap_plug => $nothing);
    replace('PVE::Network', tap_unplug => $nothing, tap_rate_limit => $nothing);
    replace('PVE::Systemd', systemd_call => $ok);
}

my $oracle_setup = \&OracleEnv::setup;
{
    no warnings 'redefine';
    *OracleEnv::setup = sub {
        my @env = $oracle_setup->(@_);
        running_vm();
        return wantarray ? @env : $env[0];
    };
}

die "harness: no oracle at $oracle\n" if !-f $oracle;
local @ARGV = ();
do $oracle;
die $@ if $@;
