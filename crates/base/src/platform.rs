//! The operating system's calls conelab makes outside the standard library, in one place, safe
//! (through `rustix` where it has them) and each platform's variant behind `cfg`, so that the
//! viewer side builds beyond Linux: macOS and the BSDs have no `SO_PEERCRED` and learn a socket
//! peer's uid from `getpeereid`.
//!
//! Compiled and tested here: Linux. The `getpeereid` branch (macOS, FreeBSD, OpenBSD, NetBSD,
//! DragonFly) is written against libc's declarations for those targets and has not been compiled
//! on them (no macOS SDK or BSD toolchain on the build machine); the decision that uses its
//! answer ([`admit_peer`]) is the same code on every platform and is tested.

use std::io;
use std::os::fd::AsFd;

/// This host's name (`uname`'s node name; "unknown" if it is empty).
pub fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy().into_owned();
    if name.is_empty() {
        "unknown".into()
    } else {
        name
    }
}

/// Runs `f` with the process's file-creation mask set to `mask`, then puts the old one back.
/// The mask is process-wide: call it before any thread that creates files starts. (Tested
/// through the run's socket, created 0600: tests/it/protocol.rs; a unit test here would change
/// the mask under the other tests of this process.)
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    use rustix::fs::Mode;
    let old = rustix::process::umask(Mode::from_bits_truncate(mask as _));
    let out = f();
    rustix::process::umask(old);
    out
}

/// The uid of the process at the other end of a Unix socket.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_uid(socket: impl AsFd) -> io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(socket)?;
    Ok(cred.uid.as_raw())
}

/// The uid of the process at the other end of a Unix socket.
#[cfg(any(
    target_vendor = "apple",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
))]
pub fn peer_uid(socket: impl AsFd) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let (mut uid, mut gid): (libc::uid_t, libc::gid_t) = (0, 0);
    // SAFETY: getpeereid writes two integers we own on this stack frame.
    let rc = unsafe { libc::getpeereid(socket.as_fd().as_raw_fd(), &mut uid, &mut gid) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

/// The uid of the process at the other end of a Unix socket: not known on this platform.
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)))]
pub fn peer_uid(_socket: impl AsFd) -> io::Result<u32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this platform cannot tell a socket peer's user",
    ))
}

/// The process id at the other end of a Unix socket, where the platform says it (Linux's
/// `SO_PEERCRED`): what a socket server paces a client process by.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn peer_pid(socket: impl AsFd) -> Option<u32> {
    let cred = rustix::net::sockopt::socket_peercred(socket).ok()?;
    u32::try_from(cred.pid.as_raw_nonzero().get()).ok()
}

/// The process id at the other end of a Unix socket: not known on this platform.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn peer_pid(_socket: impl AsFd) -> Option<u32> {
    None
}

/// Sets how many connections a listening socket keeps waiting to be accepted (`listen(2)` again
/// on a listening socket changes it on Linux and the BSDs). std listens with the system's
/// maximum (4,096 on Linux): behind that many connections of a flood a new client waits as long
/// as the server takes to accept them all.
pub fn set_backlog(listener: impl AsFd, backlog: i32) -> std::io::Result<()> {
    rustix::net::listen(listener, backlog).map_err(std::io::Error::from)
}

/// Whether stdout is a terminal that can draw: a terminal, and not `TERM=dumb` (an editor's
/// shell buffer, a serial console), where cursor moves and colours come out as escape codes.
pub fn drawing_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
}

/// This process's effective user id (what a peer's credentials are compared with).
pub fn own_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Why a socket peer is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another user's process.
    OtherUser(u32),
    /// The platform could not say whose it is.
    Unknown(String),
}

/// A socket peer is let in only when it is known to be this user (the run's socket is also
/// mode 0600: this is the second lock, for file systems that ignore modes).
pub fn admit_peer(peer: io::Result<u32>, own: u32) -> Result<(), Refusal> {
    match peer {
        Ok(uid) if uid == own => Ok(()),
        Ok(uid) => Err(Refusal::OtherUser(uid)),
        Err(e) => Err(Refusal::Unknown(e.to_string())),
    }
}

/// Blocks until `fd` (a terminal; not on macOS, whose poll refuses terminals) hangs up or fails: `poll` asking for no event still reports
/// those, and reads nothing. Interrupted waits are resumed.
pub fn wait_for_hang_up(fd: impl AsFd) -> io::Result<()> {
    use rustix::event::{PollFd, PollFlags, poll};
    loop {
        let mut fds = [PollFd::new(&fd, PollFlags::empty())];
        match poll(&mut fds, None) {
            Ok(_) => {
                let seen = fds[0].revents();
                if seen.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
                    return Ok(());
                }
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Starts a new session for this process (it loses its controlling terminal). Async-signal-safe:
/// usable between fork and exec.
pub fn new_session() -> io::Result<()> {
    rustix::process::setsid()?;
    Ok(())
}

/// Makes SIGHUP ignored by this process (and by what it executes).
pub fn ignore_hang_up() {
    // SAFETY: SIG_IGN is no handler to run; signal(2) only records it. Async-signal-safe.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}

/// Points this process's stdout and stderr at `file`, returning a new descriptor of the old
/// stdout (to say a last word to whoever started the process).
pub fn redirect_stdout_and_stderr(file: impl AsFd) -> io::Result<std::fs::File> {
    let saved = rustix::io::dup(rustix::stdio::stdout())?;
    rustix::stdio::dup2_stdout(&file)?;
    rustix::stdio::dup2_stderr(&file)?;
    Ok(std::fs::File::from(saved))
}

/// Whether the peer of a connected stream socket has closed its end with nothing left to read
/// (a read would see the end at once). Never waits.
pub fn peer_hung_up(socket: impl AsFd) -> bool {
    use rustix::net::RecvFlags;
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(socket, &mut byte[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Ok((0, _))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_admitted_only_as_this_user() {
        assert_eq!(admit_peer(Ok(1000), 1000), Ok(()));
        assert_eq!(admit_peer(Ok(0), 1000), Err(Refusal::OtherUser(0)));
        let unsupported = io::Error::new(io::ErrorKind::Unsupported, "no way to tell");
        assert_eq!(
            admit_peer(Err(unsupported), 1000),
            Err(Refusal::Unknown("no way to tell".into()))
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_socket_pair_peer_is_this_user_and_the_host_has_a_name() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        assert_eq!(peer_uid(&a).expect("uid"), own_uid());
        assert_eq!(admit_peer(peer_uid(&a), own_uid()), Ok(()));
        // uname's node name, against the kernel's own file.
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
        assert_eq!(host_name(), kernel.trim());
    }

    #[test]
    fn a_hung_up_pipe_is_seen() {
        let (read, write) = rustix::pipe::pipe().expect("pipe");
        drop(write);
        // The writer is gone: poll reports HUP on the read end at once.
        wait_for_hang_up(&read).expect("hang-up seen");
    }
}
