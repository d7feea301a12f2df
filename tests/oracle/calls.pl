#!/usr/bin/perl
# The harness's own preamble for the PVE oracle: runs ../shared/pve-oracle's oracle.pl, unmodified,
# with one more way in. The oracle's `api` requests call create_vm, then update_vm for each update;
# here an update carrying `harness-call` (`move_vm_disk`, `unlink`) is handed to that API method of
# PVE::API2::Qemu instead, through PVE's own RESTHandler `handle` (so PVE's parameter validation
# runs), with the rest of its parameters. Nothing of PVE's is copied or changed: only the entry
# point update_vm is given a dispatch in front of it, in memory, for this process.
#
#     perl tests/oracle/calls.pl ORACLE_DIR/oracle.pl   (with the oracle's PERL5LIB)
#
# What the oracle fakes still holds (its README): storage is a hash, so a move copies nothing
# and a volume's size is what the fake says; the VM never runs, so a move is always offline.

use strict;
use warnings;

my $oracle = shift @ARGV or die "usage: $0 ORACLE_DIR/oracle.pl\n";
(my $oracle_lib = $oracle) =~ s{[^/]+$}{lib};
unshift @INC, $oracle_lib;

require OracleEnv;

# After the oracle's own setup (its `use PVE::API2::Qemu` done), before its main loop.
my $oracle_setup = \&OracleEnv::setup;
{
    no warnings qw(redefine once);
    *OracleEnv::setup = sub {
        my @env = $oracle_setup->(@_);
        *PVE::API2::Qemu::update_vm = sub {
            my ($class, $param) = @_;
            my $name = delete($param->{'harness-call'}) // 'update_vm';
            die "harness: no call '$name' (tests/oracle/calls.pl)\n"
                if $name !~ m/^(update_vm|move_vm_disk|unlink)$/;
            return $class->handle($class->map_method_by_name($name), $param);
        };
        return wantarray ? @env : $env[0];
    };
}

die "harness: no oracle at $oracle\n" if !-f $oracle;
local @ARGV = ();
do $oracle;
die $@ if $@;
