//! cordon: the binary. Parses the command line and wires the layer crates together; the work
//! itself lives in `cordon-policy`, `cordon-sandbox` and `cordon-events`.

#![forbid(unsafe_code)]

mod approve;
mod beside;
mod check;
mod cli;
mod commands;
mod denials;
mod doctor;
mod explain;
mod export;
mod grants;
mod home;
mod init;
#[cfg(debug_assertions)]
mod layer_off;
mod learn;
mod logins;
mod mcp;
mod mcp_config;
mod output;
mod program;
mod project;
mod redact;
mod remember;
mod replay;
mod run;
mod session_plan;
mod ssh;
mod state;
mod summary;
mod ui;
mod vm;
mod wire;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The sandbox's init is this same executable, re-executed inside the namespaces when it
    // was not forked (`cordon_sandbox::EarlyInit`).
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == cordon_sandbox::INIT_ARG)
    {
        cordon_sandbox::init_main();
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == cordon_vm::guest::GUEST_ARG)
    {
        cordon_vm::guest::main();
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                // `run` and `explain` promise 125 for their own failures, usage errors included.
                _ if std::env::args_os()
                    .nth(1)
                    .is_some_and(|a| a == "run" || a == "explain") =>
                {
                    125
                }
                _ => 2,
            };
            return ExitCode::from(code);
        }
    };
    if !matches!(cli.command, cli::Cmd::Run(_)) {
        cordon_sandbox::exit_quietly_on_closed_stdout();
    }
    let code = commands::dispatch(cli.command);
    ExitCode::from(code.clamp(0, 255) as u8)
}
