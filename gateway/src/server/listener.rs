use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{SocketAddr, TcpListener};

/// Binds a non-blocking listener. With `reuse_port`, several can share one address, and the
/// kernel spreads new connections over them (one per core in per-core mode).
pub fn bind(addr: SocketAddr, reuse_port: bool) -> io::Result<TcpListener> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

/// `count` listeners on one address. A port of 0 is resolved by the first bind, so that
/// all of them share the port the kernel chose.
pub fn bind_group(addr: SocketAddr, count: usize) -> io::Result<Vec<TcpListener>> {
    let reuse = count > 1;
    let first = bind(addr, reuse)?;
    let actual = first.local_addr()?;
    let mut out = vec![first];
    for _ in 1..count {
        out.push(bind(actual, true)?);
    }
    Ok(out)
}

/// Raises the soft limit on open files to the hard limit, so that many connections don't
/// fail with EMFILE on a default limit of 1024.
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
