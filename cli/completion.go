package cli

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"
)

// completionCommand prints a shell's completion script for gpud. Every
// script asks gpud itself what may follow (urfave/cli answers a command
// line ending in --generate-bash-completion with the subcommands or
// flags that fit), so completion follows the binary it runs: new
// commands complete without a new script. fish gets a static script,
// generated from the same command tree.
func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash, zsh or fish",
		UsageText: "gpud completion bash|zsh|fish",
		Description: `Completes every command, subcommand and flag; gpud delete also completes finished runs.

Load it in the current shell, or install it for every new one:
   source <(gpud completion bash)                 # bash; or: gpud completion bash > /etc/bash_completion.d/gpud
   source <(gpud completion zsh)                  # zsh, after compinit
   gpud completion fish | source                  # fish; or: > ~/.config/fish/completions/gpud.fish`,
		Action: func(c *cli.Context) error {
			shell, err := oneArg(c, "shell")
			if err != nil {
				return err
			}
			switch shell {
			case "bash":
				_, err = fmt.Fprint(c.App.Writer, bashCompletion)
			case "zsh":
				_, err = fmt.Fprint(c.App.Writer, zshCompletion)
			case "fish":
				var script string
				if script, err = c.App.ToFishCompletion(); err == nil {
					_, err = fmt.Fprint(c.App.Writer, script)
				}
			default:
				return usageError(fmt.Errorf("completion: %q: give bash, zsh or fish", shell))
			}
			if err != nil {
				return errors.Join(errors.New("completion"), err)
			}
			return nil
		},
	}
}

// bashCompletion is urfave/cli's bash_autocomplete made self-contained: it
// needs no bash-completion package, and runs the words typed as arguments
// rather than through eval (a word like $(cmd) is not run). gpud is never
// asked after a "--" word, nor given "--" (as "-" instead): urfave/cli
// turns completion off after "--" and would run the command itself.
const bashCompletion = `# bash completion for gpud: source <(gpud completion bash)
_gpud_complete() {
  local cur opts
  local -a words
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  local w
  for w in "${words[@]}"; do
    # After --, gpud would run the command rather than complete it.
    [[ "$w" == "--" ]] && return 0
  done
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "${cur/#--/-}" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _gpud_complete gpud
`

// zshCompletion is urfave/cli's zsh_autocomplete for gpud, with the same
// care for "--" as bashCompletion.
const zshCompletion = `#compdef gpud
# zsh completion for gpud: source <(gpud completion zsh), after compinit
_gpud() {
  local -a opts
  local cur
  cur=${words[-1]}
  # After --, gpud would run the command rather than complete it.
  if (( ${words[(I)--]} && ${words[(I)--]} < ${#words} )); then
    _files
    return
  fi
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur/#--/-} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _gpud gpud
`
