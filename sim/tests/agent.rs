//! The guest agent's timeouts, after qemu-server QemuServer/Agent.pm (agent_cmd →
//! assert_agent_available → qga_check_running: `guest-ping` with a 3 s timeout) and
//! PVE/QMPClient.pm (a command's default 5 s timeout, `VM N qga command '…' failed - got
//! timeout`).

use std::time::{Duration, Instant};

use crate::support::{Session, Sim, quick_vm};

#[test]
fn the_ping_times_out_before_the_agent_is_up_and_a_busy_agent_times_out_its_command() {
    let sim = Sim::plain(&["--agent-delay", "4s", "--agent-busy", "6s"], &[]);
    let s = Session::login(&sim);
    quick_vm(
        &s,
        "100",
        &[("net0", "virtio,bridge=vmbr0"), ("agent", "1")],
    );
    let u = s.data("POST", "/nodes/pve1/qemu/100/status/start", &[]);
    s.wait(u.as_str().unwrap());
    let path = "/nodes/pve1/qemu/100/agent/network-get-interfaces";

    // Not up yet: the ping is answered by nobody, the request ends after its timeout.
    let t = Instant::now();
    let (code, reason, _) = s.call("GET", path, &[]);
    assert_eq!(
        (code, reason.as_str()),
        (500, "QEMU guest agent is not running")
    );
    assert!(
        t.elapsed() >= Duration::from_secs(3),
        "the ping waits its 3 s timeout"
    );

    // Up but busy: the ping answers, the command does not.
    std::thread::sleep(Duration::from_millis(1500));
    let (code, reason, _) = s.call("GET", path, &[]);
    assert_eq!(
        (code, reason.as_str()),
        (
            500,
            "VM 100 qga command 'guest-network-get-interfaces' failed - got timeout"
        )
    );

    // After the busy spell the agent answers.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _, body) = s.call("GET", path, &[]);
        if code == 200 {
            assert_eq!(body["data"]["result"][1]["name"], "eth0");
            break;
        }
        assert!(Instant::now() < deadline, "the agent never answered");
    }
}
