use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Binds a non-blocking listener. With `reuse_port`, several can share one address, and the
/// kernel spreads new connections over them (one per core in per-core mode).
pub fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let socket = tcp_socket(addr)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// A TCP socket for `addr`, with `SO_REUSEADDR` (a restart binds past the last run's
/// TIME_WAIT connections) and, for IPv6, v6 only.
fn tcp_socket(addr: SocketAddr) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(socket)
}

/// Fails with `EADDRINUSE` if any other socket holds `addr`.
///
/// `SO_REUSEPORT` lets every socket of the same user that sets it join a group: a second
/// gatehouse (or any program) on a port this one serves would start without an error and
/// silently take a share of its connections. A socket *without* the option can't be bound
/// where anyone listens (Linux refuses it, reuse-port or not, whatever the other's address
/// overlaps), so it is bound first and closed again before the group is. Tiny race: a
/// process binding the port in the microseconds between this probe's close and the first
/// listener's bind still joins; it is a startup-only window, and the listeners themselves
/// must keep `SO_REUSEPORT` to share the port among this process's runtimes. Listeners are
/// bound once, at start; a reload does not bind again.
fn probe_unshared(addr: SocketAddr) -> io::Result<()> {
    tcp_socket(addr)?.bind(&addr.into())
}

/// `count` listeners on one address. A port of 0 is resolved by the first bind, so that
/// all of them share the port the kernel chose. With `by_cpu` (and no more listeners than
/// CPUs), a new connection goes to the listener of the CPU its SYN was handled on, and the
/// returned [`Steering`] watches that this doesn't starve a listener.
pub fn bind_group(
    addr: SocketAddr,
    count: usize,
    by_cpu: bool,
) -> io::Result<(Vec<TcpListener>, Option<Arc<Steering>>)> {
    let reuse = count > 1;
    // Without SO_REUSEPORT (one listener) the bind is exclusive by itself; port 0 is a new
    // port the kernel picks.
    if reuse && addr.port() != 0 {
        probe_unshared(addr)?;
    }
    let first = bind(addr, reuse)?;
    let actual = first.local_addr()?;
    let mut out = vec![first];
    for _ in 1..count {
        out.push(bind(actual, true)?);
    }
    let mut steering = None;
    if reuse && by_cpu {
        match allowed_cpus() {
            // More listeners than CPUs: some would never be picked.
            Ok(cpus) if cpus.len() >= count && cpus.len() <= MAX_CPUS => {
                match attach(out[0].as_raw_fd(), &by_cpu_program(&cpus, count)) {
                    Ok(()) => steering = Some(Arc::new(Steering::new(actual, count))),
                    Err(e) => {
                        tracing::warn!(%addr, error = %e, "cannot steer connections by CPU; the kernel's hash spreads them")
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot read the CPU list; connections are spread by hash")
            }
        }
    }
    Ok((out, steering))
}

/// A UDP socket for `addr` (v6 only for IPv6), bound.
fn udp_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// QUIC's sockets for one address: `count` of them (one per runtime) in a `SO_REUSEPORT`
/// group, each for its own endpoint. A classic BPF program (`by_cid_program`) hands each
/// datagram to the socket numbered after its destination connection ID, which gatehouse
/// chooses so (`http3::SteeredCid`): a connection's packets reach the endpoint that holds
/// it, from any address, so migration (RFC 9000 §9) works as with one socket. Without the
/// program (it could not be attached) the group is one socket. As for TCP, an address
/// another socket holds is refused first (`probe_unshared`).
pub fn bind_udp_group(addr: SocketAddr, count: usize) -> io::Result<Vec<UdpSocket>> {
    // The program steers by one byte: at most 256 sockets (runtimes past them serve TCP).
    let count = count.min(256);
    if count <= 1 || addr.port() == 0 {
        return Ok(vec![udp_socket(addr, false)?]);
    }
    udp_socket(addr, false)?;
    let first = udp_socket(addr, true)?;
    if let Err(e) = attach(first.as_raw_fd(), &by_cid_program(count)) {
        tracing::warn!(%addr, error = %e, "cannot steer QUIC packets by connection ID; HTTP/3 runs on one runtime");
        return Ok(vec![first]);
    }
    let mut out = vec![first];
    for _ in 1..count {
        match udp_socket(addr, true) {
            Ok(s) => out.push(s),
            Err(e) => {
                tracing::warn!(%addr, error = %e, "HTTP/3 runs on one runtime");
                out.truncate(1);
                break;
            }
        }
    }
    Ok(out)
}

/// Turns UDP GRO off on a socket of a steered group (quinn turns it on). GRO merges
/// datagrams of one address pair into one buffer and the group's program runs once, on
/// the first: a client with several connections on one socket (a connection pool) would
/// have the others' datagrams handed to the wrong endpoint.
#[allow(unsafe_code)] // setsockopt(UDP_GRO).
pub fn udp_gro_off(fd: RawFd) -> io::Result<()> {
    // SAFETY: a plain int, with no pointer in it.
    unsafe { setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, &(0 as libc::c_int)) }
}

// linux/bpf_common.h
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_JMP_JSET_K: u16 = 0x45;
const BPF_JMP_JA: u16 = 0x05;
const BPF_ALU_MOD_K: u16 = 0x94;
const BPF_RET_A: u16 = 0x16;

/// The socket for a QUIC datagram: the first byte of its destination connection ID, mod
/// `count`. That ID starts at byte 1 of a short header (RFC 9000 §17.3) and at byte 6 of a
/// long one (§17.2: the first byte, four of version, one of length). A new client's Initial
/// carries an ID it chose at random, so new connections spread evenly; every later packet
/// carries one the endpoint chose.
fn by_cid_program(count: usize) -> Vec<libc::sock_filter> {
    vec![
        op(BPF_LD_B_ABS, 0, 0, 0),
        // Long header (the form bit): to the load of byte 6.
        op(BPF_JMP_JSET_K, 2, 0, 0x80),
        op(BPF_LD_B_ABS, 0, 0, 1),
        op(BPF_JMP_JA, 0, 0, 1),
        op(BPF_LD_B_ABS, 0, 0, 6),
        op(BPF_ALU_MOD_K, 0, 0, count as u32),
        op(BPF_RET_A, 0, 0, 0),
    ]
}

const MAX_CPUS: usize = 1024;

// linux/filter.h and linux/bpf_common.h
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const SKF_AD_CPU: u32 = (-0x1000i32 + 36) as u32;
/// An index past the group's end: the kernel falls back to its hash.
const BY_HASH: u32 = u32::MAX;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A classic BPF program for a `SO_REUSEPORT` group that picks, for each new connection,
/// the listener numbered after the CPU that handled its SYN (the n-th CPU this process may
/// run on goes to listener n mod `count`), instead of a hash of the addresses. The
/// connections are spread over the runtimes by where they come from, evenly and stably,
/// rather than by the luck of the hash. The runtimes' threads are not pinned, so any
/// locality is the scheduler's doing: docs/src/performance-notes.md ("Steering connections
/// by CPU") has what it measured. Any other CPU goes by hash.
fn by_cpu_program(cpus: &[u32], count: usize) -> Vec<libc::sock_filter> {
    let mut prog = Vec::with_capacity(cpus.len() * 2 + 2);
    prog.push(op(BPF_LD_W_ABS, 0, 0, SKF_AD_CPU));
    for (n, &cpu) in cpus.iter().enumerate() {
        // Equal: fall into the next instruction, the return; else skip over it.
        prog.push(op(BPF_JMP_JEQ_K, 0, 1, cpu));
        prog.push(op(BPF_RET_K, 0, 0, (n % count) as u32));
    }
    prog.push(op(BPF_RET_K, 0, 0, BY_HASH));
    prog
}

#[allow(unsafe_code)] // setsockopt(SO_ATTACH_REUSEPORT_CBPF).
fn attach(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: fprog points at `prog` (its length given), alive for the call; the kernel
    // copies the program and never writes through the pointer.
    unsafe { setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_REUSEPORT_CBPF, &fprog) }
}

/// setsockopt(2) with `value` as the option's value.
///
/// # Safety
/// Any pointer in `value` must be valid for what the option reads through it.
#[allow(unsafe_code)] // FFI: setsockopt.
unsafe fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live `T` for the call and the length given is its size; the
    // caller vouches for what it points at.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[repr(align(64))]
struct Padded(AtomicU32);

/// Watches a group steered by CPU: if new connections arrive from too few CPUs (a network
/// card with one receive queue hands every SYN to one CPU; so does a single-threaded local
/// client), steering would leave some runtimes idle, so the group goes back to the hash.
pub struct Steering {
    addr: SocketAddr,
    /// Connections accepted by each listener in the current window.
    window: Box<[Padded]>,
    /// Held by the one listener closing a window, so that no other reads it half-emptied.
    closing: AtomicBool,
    /// Windows in a row in which a listener was starved.
    starved: AtomicU32,
    /// Set once the group is back on the hash (or failed to go back: then the kernel may
    /// still steer, and the warning says so).
    off: AtomicBool,
}

/// The window closes when one listener has accepted this many; a listener that got less
/// than an eighth of that is starved, and this many starved windows in a row (not one
/// burst, such as a health checker's) end steering.
const WINDOW: u32 = 32;
const STARVED_WINDOWS: u32 = 3;

impl Steering {
    fn new(addr: SocketAddr, count: usize) -> Self {
        Steering {
            addr,
            window: (0..count).map(|_| Padded(AtomicU32::new(0))).collect(),
            closing: AtomicBool::new(false),
            starved: AtomicU32::new(0),
            off: AtomicBool::new(false),
        }
    }

    /// Counts a connection accepted by listener `index`, whose descriptor is `fd`.
    pub fn accepted(&self, index: usize, fd: RawFd) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let Some(mine) = self.window.get(index) else {
            return;
        };
        if mine.0.fetch_add(1, Ordering::Relaxed) + 1 < WINDOW
            || self.closing.swap(true, Ordering::Acquire)
        {
            return;
        }
        let counts: Vec<u32> = self
            .window
            .iter()
            .map(|c| c.0.swap(0, Ordering::Relaxed))
            .collect();
        self.closing.store(false, Ordering::Release);
        // Below WINDOW: another listener closed this window just before, and these are the
        // first counts of the next one.
        if counts[index] < WINDOW {
            return;
        }
        if counts.iter().all(|&c| c >= WINDOW / 8) {
            self.starved.store(0, Ordering::Relaxed);
            return;
        }
        if self.starved.fetch_add(1, Ordering::Relaxed) + 1 < STARVED_WINDOWS
            || self.off.swap(true, Ordering::Relaxed)
        {
            return;
        }
        match attach(fd, &[op(BPF_RET_K, 0, 0, BY_HASH)]) {
            Ok(()) => tracing::warn!(
                addr = %self.addr, accepted = ?counts,
                "new connections come from too few CPUs to steer by CPU; spreading them by hash from now on"
            ),
            Err(e) => {
                tracing::warn!(addr = %self.addr, error = %e, "cannot stop steering connections by CPU")
            }
        }
    }

    pub fn is_on(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }
}

/// The CPUs the calling thread may run on (at start, the process's), in ascending order.
#[allow(unsafe_code)] // FFI: sched_getaffinity.
fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        set
    };
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: c is below CPU_SETSIZE, the set's size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

/// Raises the soft limit on open files to the hard limit, so that many connections don't
/// fail with EMFILE on a default limit of 1024.
#[allow(unsafe_code)] // FFI: getrlimit, setrlimit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    #[allow(unsafe_code)] // FFI: sched_setaffinity.
    fn pin_to(cpu: u32) -> io::Result<()> {
        // SAFETY: as in allowed_cpus; pid 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    fn connect_from(cpu: u32, addr: SocketAddr, n: usize) -> Vec<TcpStream> {
        let cpu_thread = std::thread::spawn(move || {
            pin_to(cpu).expect("pin the connecting thread");
            (0..n)
                .map(|_| TcpStream::connect(addr).expect("connect"))
                .collect::<Vec<_>>()
        });
        cpu_thread.join().expect("connecting thread")
    }

    /// Accepts from each listener until `total` connections have come, or 5 s have passed:
    /// the last handshakes may still be on their way to the accept queues.
    fn accepted_of(group: &[TcpListener], total: usize) -> Vec<usize> {
        accepted_each(group, total, |_| {})
    }

    /// [`accepted_of`], calling `each` with the index of the listener of every connection.
    fn accepted_each(
        group: &[TcpListener],
        total: usize,
        mut each: impl FnMut(usize),
    ) -> Vec<usize> {
        let mut got = vec![0; group.len()];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.iter().sum::<usize>() < total && std::time::Instant::now() < deadline {
            for (n, l) in group.iter().enumerate() {
                while let Ok(_conn) = l.accept() {
                    got[n] += 1;
                    each(n);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        got
    }

    /// A group never joins a port another socket listens on, whether that one set
    /// SO_REUSEPORT or not, and binds once the port is free again.
    #[test]
    fn a_group_never_joins_a_port_someone_else_holds() {
        for other_reuses in [false, true] {
            let other = bind("127.0.0.1:0".parse().unwrap(), other_reuses).expect("bind");
            let addr = other.local_addr().unwrap();
            let Err(e) = bind_group(addr, 2, false) else {
                panic!("joined a port held by another socket (SO_REUSEPORT: {other_reuses})");
            };
            assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{other_reuses}");
            drop(other);
            let (group, _) = bind_group(addr, 2, false).expect("free again");
            assert_eq!(group.len(), 2);
        }
    }

    #[test]
    fn steering_by_cpu_sends_a_cpus_connections_to_its_listener() {
        let cpus = allowed_cpus().expect("affinity");
        let (group, steering) = bind_group("127.0.0.1:0".parse().unwrap(), 2, true).expect("bind");
        if cpus.len() < 2 {
            assert!(steering.is_none(), "one CPU can't steer to two listeners");
            return;
        }
        assert!(steering.is_some());
        let addr = group[0].local_addr().unwrap();
        for (n, &cpu) in cpus.iter().take(2).enumerate() {
            let _held = connect_from(cpu, addr, 20);
            let mut want = vec![0, 0];
            want[n] = 20;
            assert_eq!(
                accepted_of(&group, 20),
                want,
                "connections made on CPU {cpu}"
            );
        }
    }

    #[test]
    fn without_steering_the_hash_spreads_one_cpus_connections() {
        let cpus = allowed_cpus().expect("affinity");
        let (group, steering) = bind_group("127.0.0.1:0".parse().unwrap(), 2, false).expect("bind");
        assert!(steering.is_none());
        let addr = group[0].local_addr().unwrap();
        let _held = connect_from(cpus[0], addr, 64);
        let got = accepted_of(&group, 64);
        assert_eq!(got.iter().sum::<usize>(), 64);
        // All 64 on one listener by chance: 2 in 2^64.
        assert!(got.iter().all(|&n| n > 0), "{got:?}");
    }

    #[test]
    fn steering_stays_on_while_every_listener_gets_its_share() {
        let s = Steering::new("127.0.0.1:1".parse().unwrap(), 3);
        // Uneven but none starved: 6 in 8 to the first, an eighth each to the others.
        for i in 0..10 * WINDOW as usize {
            s.accepted([1, 2, 0, 0, 0, 0, 0, 0][i % 8], -1);
        }
        assert!(s.is_on());
        let one_sided = |s: &Steering| {
            for _ in 0..WINDOW {
                s.accepted(2, -1);
            }
        };
        // One burst from one CPU is not enough, and a fair window after it starts again...
        one_sided(&s);
        assert!(s.is_on(), "one starved window");
        for i in 0..3 * WINDOW as usize {
            s.accepted([1, 2, 0][i % 3], -1);
        }
        for _ in 1..STARVED_WINDOWS {
            one_sided(&s);
        }
        assert!(s.is_on(), "starved windows, but not in a row");
        for i in 0..3 * WINDOW as usize {
            s.accepted([1, 2, 0][i % 3], -1);
        }
        // ... but windows in a row are.
        for _ in 0..STARVED_WINDOWS {
            one_sided(&s);
        }
        assert!(!s.is_on(), "{STARVED_WINDOWS} starved windows in a row");
    }

    #[test]
    fn steering_falls_back_to_the_hash_when_one_cpu_brings_every_connection() {
        let cpus = allowed_cpus().expect("affinity");
        let (group, steering) = bind_group("127.0.0.1:0".parse().unwrap(), 2, true).expect("bind");
        let Some(steering) = steering else {
            assert!(cpus.len() < 2, "{} CPUs, and no steering", cpus.len());
            return;
        };
        let addr = group[0].local_addr().unwrap();
        let n = (STARVED_WINDOWS * WINDOW) as usize + 10;
        let _first = connect_from(cpus[0], addr, n);
        let got = accepted_each(&group, n, |i| steering.accepted(i, group[i].as_raw_fd()));
        assert_eq!(got, [n, 0], "all came to the first");
        assert!(!steering.is_on());
        let _then = connect_from(cpus[0], addr, 64);
        let got = accepted_of(&group, 64);
        assert!(got.iter().all(|&n| n > 0), "{got:?}");
    }
}
