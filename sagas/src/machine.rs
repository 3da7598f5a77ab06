//! A saga's state machine as data, for pictures: its states, its
//! transitions with the message types that can take each one, and
//! [`Machine::path`], the way a saga's history most plausibly went through
//! it (the store keeps each save's message type, not each save's state).

use schemars::JsonSchema;
use serde::Serialize;

/// A state machine as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// The field of the saga's state that names where it is (`phase`).
    pub state_field: &'static str,
    /// The state before the first message (a [`MachineState::value`]).
    pub initial: &'static str,
    /// Every state, in the order of the diagram.
    pub states: Vec<MachineState>,
    /// Every transition.
    pub transitions: Vec<MachineTransition>,
}

/// One state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineState {
    /// Its value in the saga's state (`awaitingApproval`).
    pub value: &'static str,
    /// Its name in the diagram (`AwaitingApproval`).
    pub name: &'static str,
    /// What the saga waits for in it.
    pub description: &'static str,
    /// Whether nothing moves the saga out of it.
    #[serde(rename = "final")]
    pub is_final: bool,
}

/// One transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTransition {
    /// The state left (a [`MachineState::value`]).
    pub from: &'static str,
    /// The state entered (the same for a step that stays).
    pub to: &'static str,
    /// What triggers it and what the saga emits.
    pub label: &'static str,
    /// The message types that can take it.
    pub triggers: &'static [&'static str],
}

/// What one saved message did, as [`Machine::path`] reconstructs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The state before the message.
    pub from: &'static str,
    /// The state after it.
    pub to: &'static str,
    /// The transition taken (an index into [`Machine::transitions`]);
    /// `None` when the message changed no state by a drawn transition.
    pub transition: Option<usize>,
}

/// How a way reached a state: the state it came from and the transition
/// it took (`None`: it stayed).
type Came = (usize, Option<usize>);

impl Machine {
    fn index_of(&self, value: &str) -> Option<usize> {
        self.states.iter().position(|state| state.value == value)
    }

    /// The way `history` (the message type of each save, oldest first)
    /// most plausibly went from [`Machine::initial`] to `current`: one
    /// [`Step`] per save. Each message takes a transition from the state it
    /// found that its type can trigger, or leaves the state as it is (a
    /// message the saga ignored); of the ways that end in `current`, the
    /// one taking the most transitions that change state. `None` when
    /// `current` is not a state of the machine or no way ends in it.
    pub fn path(&self, history: &[&str], current: &str) -> Option<Vec<Step>> {
        let states = self.states.len();
        let start = self.index_of(self.initial)?;
        let end = self.index_of(current)?;
        // best[s]: the most state changes of a way to s so far; back[i][s]:
        // how the way to s after message i came there.
        let mut best: Vec<Option<usize>> = vec![None; states];
        best[start] = Some(0);
        let mut back: Vec<Vec<Option<Came>>> = Vec::with_capacity(history.len());
        for message_type in history {
            let mut next: Vec<Option<usize>> = vec![None; states];
            let mut came: Vec<Option<Came>> = vec![None; states];
            for (from, score) in best.iter().enumerate() {
                let Some(score) = *score else { continue };
                // Staying, untouched by a drawn transition.
                if next[from].is_none_or(|known| score > known) {
                    next[from] = Some(score);
                    came[from] = Some((from, None));
                }
                for (index, transition) in self.transitions.iter().enumerate() {
                    if transition.from != self.states[from].value || !transition.triggers.contains(message_type) {
                        continue;
                    }
                    let Some(to) = self.index_of(transition.to) else {
                        continue;
                    };
                    let gained = score + usize::from(to != from);
                    if next[to].is_none_or(|known| gained > known) {
                        next[to] = Some(gained);
                        came[to] = Some((from, Some(index)));
                    }
                }
            }
            best = next;
            back.push(came);
        }
        best[end]?;
        let mut steps = Vec::with_capacity(history.len());
        let mut at = end;
        for came in back.iter().rev() {
            let (from, transition) = came[at]?;
            steps.push(Step {
                from: self.states[from].value,
                to: self.states[at].value,
                transition,
            });
            at = from;
        }
        steps.reverse();
        Some(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        let state = |value, is_final| MachineState {
            value,
            name: value,
            description: "",
            is_final,
        };
        let edge = |from, to, triggers| MachineTransition {
            from,
            to,
            label: "",
            triggers,
        };
        Machine {
            state_field: "phase",
            initial: "a",
            states: vec![state("a", false), state("b", false), state("c", true)],
            transitions: vec![
                edge("a", "a", &["Collect"]),
                edge("a", "b", &["Collect"]),
                edge("b", "c", &["Finish"]),
                edge("b", "b", &["Finish"]),
            ],
        }
    }

    #[test]
    fn the_path_ends_in_the_current_state_and_takes_the_most_changes() {
        let machine = machine();
        let path = machine.path(&["Collect", "Collect", "Finish"], "c").unwrap();
        let taken: Vec<_> = path.iter().map(|step| step.transition).collect();
        // Collect stays (self-loop) once and moves once, Finish moves.
        assert_eq!(path.last().unwrap().to, "c");
        assert_eq!(path.iter().filter(|s| s.from != s.to).count(), 2);
        assert!(taken.contains(&Some(1)) && taken.contains(&Some(2)), "{path:?}");
        // Ending in b: Finish stays.
        let path = machine.path(&["Collect", "Finish"], "b").unwrap();
        assert_eq!(path[0].transition, Some(1));
        assert_eq!((path[1].from, path[1].to), ("b", "b"));
    }

    #[test]
    fn an_ignored_message_leaves_the_state_and_an_impossible_end_is_none() {
        let machine = machine();
        let path = machine.path(&["Unrelated", "Collect"], "b").unwrap();
        assert_eq!(path[0].transition, None);
        assert_eq!((path[0].from, path[0].to), ("a", "a"));
        assert_eq!(
            machine.path(&["Finish"], "c"),
            None,
            "c is not reachable from a by Finish"
        );
        assert_eq!(machine.path(&[], "zzz"), None);
        assert_eq!(machine.path(&[], "a").unwrap(), Vec::<Step>::new());
    }
}
