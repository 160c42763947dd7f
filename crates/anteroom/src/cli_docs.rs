//! `anteroom completions <shell>` and `anteroom man`: shell completion scripts and manual pages
//! generated from the clap definition that parses the command line, so they cannot drift from it.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::Cli;

/// The name the scripts complete and the pages document: the installed binary's.
const BIN_NAME: &str = "anteroom";

/// Prints the completion script for `shell`.
pub(crate) fn completions(shell: Shell) -> anyhow::Result<ExitCode> {
    // clap_complete panics when its writer fails: it writes into memory, and the script goes to
    // stdout in one checked write.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, &mut script);
    write_to_stdout(&script)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints anteroom(1), whose SUBCOMMANDS section names each subcommand's own page.
pub(crate) fn man_page() -> anyhow::Result<ExitCode> {
    let mut page = Vec::new();
    manual(documented_command()).render(&mut page)?;
    write_to_stdout(&page)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes anteroom.1 and one page per subcommand (anteroom-serve.1, anteroom-keys-generate.1,
/// …) into `dir`: the pages anteroom(1) refers to.
#[allow(clippy::print_stdout)]
pub(crate) fn man_pages_into(dir: &Path) -> anyhow::Result<ExitCode> {
    let mut command = documented_command();
    // Building gives every subcommand its full name (`anteroom-keys-generate`).
    command.build();
    write_pages(&command, dir)?;
    println!("manual pages written to {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// The command as the pages document it: without clap's `help` subcommands, which would be
/// listed as anteroom-help(1), a page nobody writes (`--help` stays documented).
fn documented_command() -> clap::Command {
    Cli::command()
        .disable_help_subcommand(true)
        .mut_subcommands(|subcommand| subcommand.disable_help_subcommand(true))
}

/// The page of `command`, titled in capitals as manual pages are; every page's footer names the
/// release (clap knows the version of the top command only).
fn manual(command: clap::Command) -> clap_mangen::Man {
    let title = command
        .get_display_name()
        .unwrap_or_else(|| command.get_name())
        .to_uppercase();
    clap_mangen::Man::new(command)
        .title(title)
        .source(concat!("anteroom ", env!("CARGO_PKG_VERSION")))
}

fn write_pages(command: &clap::Command, dir: &Path) -> anyhow::Result<()> {
    let page = manual(command.clone());
    let path = dir.join(page.get_filename());
    let mut file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    page.render(&mut file)
        .and_then(|()| file.flush())
        .with_context(|| format!("writing {}", path.display()))?;
    for subcommand in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(subcommand, dir)?;
    }
    Ok(())
}

fn write_to_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        // A reader that stopped early (`anteroom man | head`) wanted no more.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.context("writing to stdout"),
    }
}
