//! The first process of every sandboxed container (`/.nest/init PROGRAM ARGS…`, the node's own binary): it starts
//! the container's program, forwards the signals it gets to it, reaps the orphans of the container's PID namespace,
//! and exits as the program did (its code, or 128 + the signal that killed it).
//!
//! Two things a bare program as PID 1 would get wrong: the kernel gives PID 1 only the signals it has a handler for,
//! so a program without a SIGTERM handler would ignore the kubelet's SIGTERM; and nothing would reap orphans. And it
//! asks the kernel to kill it when its parent, the OCI runtime's process, dies: the runtime's process dies with the
//! node, and the whole container with its PID 1, so no container outlives its node.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;

/// Runs the init; never returns.
pub fn run(args: Vec<OsString>) -> ! {
    let Some((program, rest)) = args.split_first() else {
        eprintln!("{}: usage: {} PROGRAM [ARGS…]", super::sandbox::INIT_PATH, super::sandbox::INIT_PATH);
        std::process::exit(2);
    };
    // SAFETY: plain libc calls on local, initialised values; the signal mask is restored in the child before exec.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut before);
        let mut command = std::process::Command::new(program);
        command.args(rest).pre_exec(move || {
            libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
            Ok(())
        });
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                eprintln!("{}: {error}", program.to_string_lossy());
                let code = if error.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
                std::process::exit(code);
            }
        };
        let main = child.id() as libc::pid_t;
        loop {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let signal = libc::sigwaitinfo(&all, &mut info);
            if signal < 0 {
                continue;
            }
            if signal != libc::SIGCHLD {
                libc::kill(main, signal);
                continue;
            }
            loop {
                let mut status = 0;
                let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if pid <= 0 {
                    break;
                }
                if pid == main {
                    let code =
                        if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
                    std::process::exit(code);
                }
            }
        }
    }
}
