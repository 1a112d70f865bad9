//! Terminals: the sandbox's own pty, its controlling terminal, window size, raw mode.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

pub(crate) fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
}

pub(crate) fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty takes an integer.
    unsafe { libc::isatty(fd) == 1 }
}

/// Open a new pseudo-terminal pair from `/dev/ptmx`; returns (master, slave).
pub(crate) fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt with constant flags.
    let m = cvt(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: fresh descriptor owned by us.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    // SAFETY: grantpt/unlockpt on the master we just opened.
    unsafe {
        cvt(libc::grantpt(master.as_raw_fd()))?;
        cvt(libc::unlockpt(master.as_raw_fd()))?;
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: name has the declared length.
    let r = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    // SAFETY: ptsname_r NUL-terminated the buffer on success.
    let path = unsafe { CStr::from_ptr(name.as_ptr()) };
    // SAFETY: open with a NUL-terminated path.
    let s = cvt(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: fresh descriptor owned by us.
    Ok((master, unsafe { OwnedFd::from_raw_fd(s) }))
}

/// Window size of a terminal: (rows, cols, xpixel, ypixel).
pub(crate) fn get_winsize(fd: RawFd) -> io::Result<[u16; 4]> {
    // SAFETY: winsize is plain old data.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes into the winsize we own.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) })?;
    Ok([ws.ws_row, ws.ws_col, ws.ws_xpixel, ws.ws_ypixel])
}

pub(crate) fn set_winsize(fd: RawFd, w: [u16; 4]) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: w[0],
        ws_col: w[1],
        ws_xpixel: w[2],
        ws_ypixel: w[3],
    };
    // SAFETY: TIOCSWINSZ reads the winsize we own.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }).map(drop)
}

/// Terminal attributes, saved so raw mode can be undone.
pub(crate) struct Termios(libc::termios);

pub(crate) fn get_termios(fd: RawFd) -> io::Result<Termios> {
    // SAFETY: termios is plain old data; tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: t is a valid termios.
    cvt(unsafe { libc::tcgetattr(fd, &mut t) })?;
    Ok(Termios(t))
}

pub(crate) fn set_termios(fd: RawFd, t: &Termios) -> io::Result<()> {
    // SAFETY: t.0 is a valid termios.
    cvt(unsafe { libc::tcsetattr(fd, libc::TCSADRAIN, &t.0) }).map(drop)
}

/// Put a terminal in raw mode; returns the previous attributes.
pub(crate) fn make_raw(fd: RawFd) -> io::Result<Termios> {
    let old = get_termios(fd)?;
    let mut raw = Termios(old.0);
    // SAFETY: cfmakeraw edits the termios we own.
    unsafe { libc::cfmakeraw(&mut raw.0) };
    set_termios(fd, &raw)?;
    Ok(old)
}
