//! `--set KEY=VALUE` overrides, the unknown-key check, and the one-line messages for TOML
//! syntax and type errors.

use toml::{Table, Value};

use super::{
    default_mlp_hidden, default_width, Augment, ClusterConfig, CompressionConfig, Config,
    ConfigError, DataConfig, DatasetKind, DeviceConfig, HeterogeneityConfig, ModelConfig,
    ModelKind, OptimConfig, RunConfig, SpeedChange, SpeedTier, SyncConfig, SyntheticConfig,
};

/// A config with every optional list non-empty, serialised: the tree of allowed keys.
/// Derived from the types themselves so it cannot drift from them.
pub(super) fn schema() -> Table {
    let sample = Config {
        run: RunConfig::default(),
        data: DataConfig {
            dataset: DatasetKind::Synthetic,
            dir: String::new(),
            train_limit: 0,
            test_limit: 0,
            synthetic: SyntheticConfig::default(),
            augment: Augment::default(),
        },
        model: ModelConfig {
            name: ModelKind::Mlp,
            mlp_hidden: default_mlp_hidden(),
            width: default_width(),
            init_file: String::new(),
        },
        optim: OptimConfig::default(),
        sync: SyncConfig::default(),
        compression: CompressionConfig::default(),
        heterogeneity: HeterogeneityConfig {
            tiers: vec![SpeedTier {
                factor: 1.0,
                workers: 1,
            }],
            changes: vec![SpeedChange {
                at_s: 0.0,
                worker: 0,
                factor: 1.0,
            }],
            ..HeterogeneityConfig::default()
        },
        device: DeviceConfig::default(),
        cluster: ClusterConfig::default(),
    };
    // A fixed, valid sample: serialising it cannot fail.
    Table::try_from(&sample).expect("the schema sample serialises to a TOML table")
}

/// Rejects any key of `user` that `schema` lacks, naming it by its full dotted path (for
/// example `optim.lrr` or `heterogeneity.tiers[0].workerz`). This is the config's only
/// unknown-key check: the serde types accept unknown fields.
pub(super) fn check_known_keys(
    user: &Table,
    schema: &Table,
    prefix: &str,
    origin: &str,
) -> Result<(), ConfigError> {
    for (k, v) in user {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let Some(allowed) = schema.get(k) else {
            let mut allowed = schema.keys().cloned().collect::<Vec<_>>().join(", ");
            if let Some(new) = moved_to(&key) {
                allowed.push_str(&format!("; {key} is now {new}"));
            }
            return Err(ConfigError::UnknownKey {
                origin: origin.to_string(),
                key,
                allowed,
            });
        };
        match (v, allowed) {
            (Value::Table(u), Value::Table(s)) => check_known_keys(u, s, &key, origin)?,
            (Value::Array(items), Value::Array(sample)) => {
                if let Some(Value::Table(s)) = sample.first() {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::Table(u) = item {
                            check_known_keys(u, s, &format!("{key}[{i}]"), origin)?;
                        }
                    }
                }
            }
            // Type mismatches are left to the deserialiser, which names the expected type.
            _ => {}
        }
    }
    Ok(())
}

/// Where a key of an older config format lives now: the mode settings that `[sync]` held
/// moved into the section of their mode.
fn moved_to(key: &str) -> Option<String> {
    const GSSP: [&str; 11] = [
        "groups",
        "max_groups",
        "grouping",
        "profile_iters",
        "static_groups",
        "inter_group_every",
        "mailbox_messages",
        "sparse_transport",
        "drain_on_arrival",
        "regroup_every_s",
        "regroup_min_gain",
    ];
    let name = key.strip_prefix("sync.")?;
    match name {
        "staleness" => Some("sync.ssp.staleness or sync.gssp.staleness".to_string()),
        "local_steps" => Some("sync.localsgd.local_steps".to_string()),
        _ if GSSP.contains(&name) => Some(format!("sync.gssp.{name}")),
        _ => None,
    }
}

/// Sets one `dotted.key=VALUE` override into the parsed tree.
pub(super) fn apply_override(root: &mut Table, text: &str) -> Result<(), ConfigError> {
    let fail = |reason: &str| ConfigError::Override {
        text: text.to_string(),
        reason: reason.to_string(),
    };
    let Some((key, raw)) = text.split_once('=') else {
        return Err(fail("expected dotted.key=VALUE"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(fail("the key before `=` is empty"));
    }
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(fail("the key has an empty segment"));
    }
    let value = parse_override_value(raw.trim());
    let (last, parents) = parts.split_last().ok_or_else(|| fail("empty key"))?;
    let mut table = root;
    let mut path = String::new();
    for part in parents {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(part);
        let entry = table
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        table = match entry {
            Value::Table(t) => t,
            _ => return Err(fail(&format!("{path} is not a table"))),
        };
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// A TOML value when `raw` is exactly one, otherwise the raw text as a string.
fn parse_override_value(raw: &str) -> Value {
    match toml::from_str::<Table>(&format!("v = {raw}")) {
        Ok(mut t) if t.len() == 1 => t.remove("v").unwrap_or_else(|| Value::String(raw.into())),
        _ => Value::String(raw.to_string()),
    }
}

pub(super) fn syntax_error(text: &str, source: &str, e: &toml::de::Error) -> ConfigError {
    let location = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{source}:{line}:{column}")
        }
        None => source.to_string(),
    };
    ConfigError::Syntax {
        location,
        message: one_line(e.message()),
    }
}

/// Deserialising from a value tree reports the key as a trailing "in `a.b`" line.
pub(super) fn type_error(source: &str, overrides: &[String], e: &toml::de::Error) -> ConfigError {
    let text = e.to_string();
    let key = text
        .rfind("\nin `")
        .map(|i| text[i + 5..].trim_end().trim_end_matches('`').to_string())
        .unwrap_or_default();
    let origin = if overrides.is_empty() {
        source.to_string()
    } else {
        format!("{source} (with overrides)")
    };
    ConfigError::Type {
        origin,
        key,
        message: one_line(e.message()),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{example_path, with, MINIMAL};
    use crate::config::SyncMode;

    #[test]
    fn example_toml_sets_every_key() {
        let text = std::fs::read_to_string(example_path()).unwrap();
        let file: Table = toml::from_str(&text).unwrap();
        fn missing(file: &Table, schema: &Table, prefix: &str, out: &mut Vec<String>) {
            for (k, v) in schema {
                let key = format!("{prefix}{k}");
                match (file.get(k), v) {
                    (None, _) if key != "heterogeneity.tiers" => out.push(key),
                    (Some(Value::Table(f)), Value::Table(s)) => {
                        missing(f, s, &format!("{key}."), out)
                    }
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        missing(&file, &schema(), "", &mut out);
        assert!(out.is_empty(), "example.toml lacks {out:?}");
    }

    #[test]
    fn syntax_error_names_source_line_and_column() {
        let text = "[run]\nepochs = = 2\n";
        let msg = Config::from_str_with_overrides(text, "bad.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("bad.toml:2:"), "{msg}");
        assert!(msg.contains("invalid TOML"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn missing_required_section_is_reported() {
        let msg = Config::from_str_with_overrides("[data]\ndataset = \"mnist\"\n", "t.toml", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "t.toml: missing field `model`");
    }

    #[test]
    fn unknown_keys_are_named_with_full_path() {
        let text = format!("{MINIMAL}[optim]\nlrr = 0.1\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("f.toml: unknown key optim.lrr (allowed there: "),
            "{msg}"
        );
        assert!(msg.contains("lr, lr_decay"), "{msg}");

        let text = format!("{MINIMAL}[data.synthetic]\ntrian = 3\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown key data.synthetic.trian"), "{msg}");

        let text = format!("{MINIMAL}[[heterogeneity.tiers]]\nfactor = 2.0\nworkerz = 1\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("unknown key heterogeneity.tiers[0].workerz"),
            "{msg}"
        );

        let msg = Config::from_str_with_overrides(&format!("{MINIMAL}[optimizer]\n"), "f", &[])
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("f: unknown key optimizer "), "{msg}");
    }

    #[test]
    fn only_gssp_reads_a_profile_for_its_staleness() {
        let msg = with(&["sync.ssp.staleness=auto"]).unwrap_err().to_string();
        assert!(
            msg.contains("sync.ssp.staleness: invalid type: string \"auto\", expected usize"),
            "{msg}"
        );
        with(&["sync.gssp.staleness=auto"]).unwrap();
    }

    #[test]
    fn a_mode_setting_of_the_older_format_says_where_it_lives_now() {
        let text = format!("{MINIMAL}[sync]\nmode = \"gssp\"\ngroups = 2\n");
        let msg = Config::from_str_with_overrides(&text, "old.toml", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "old.toml: unknown key sync.groups (allowed there: async_localsgd, balance, gssp, localsgd, max_shards, mode, overlap, shards, ssp; sync.groups is now sync.gssp.groups)"
        );
        let msg = with(&["sync.staleness=0"]).unwrap_err().to_string();
        assert!(
            msg.ends_with("sync.staleness is now sync.ssp.staleness or sync.gssp.staleness)"),
            "{msg}"
        );
        let msg = with(&["sync.local_steps=2"]).unwrap_err().to_string();
        assert!(msg.ends_with("is now sync.localsgd.local_steps)"), "{msg}");
    }

    #[test]
    fn type_errors_name_key_and_expected_type() {
        let text = format!("{MINIMAL}[optim]\nlr = \"fast\"\n");
        let msg = Config::from_str_with_overrides(&text, "f.toml", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "f.toml: optim.lr: invalid type: string \"fast\", expected f64"
        );

        let msg = with(&["optim.batch_size=-1"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "test.toml (with overrides): optim.batch_size: invalid value: integer `-1`, expected usize"
        );

        let msg = with(&["sync.mode=sspp"]).unwrap_err().to_string();
        assert!(msg.contains("sync.mode: unknown variant `sspp`"), "{msg}");
        assert!(msg.contains("`gssp`"), "{msg}");

        let msg = with(&["sync.gssp.staleness=soon"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "test.toml (with overrides): sync.gssp.staleness: invalid value: string \"soon\", expected an integer >= 0 or \"auto\""
        );
        let msg = with(&["sync.gssp.staleness=-2"]).unwrap_err().to_string();
        assert!(
            msg.contains("sync.gssp.staleness: invalid value: integer `-2`"),
            "{msg}"
        );

        let msg = with(&["sync.gssp.sparse_transport=put"])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("sync.gssp.sparse_transport: unknown variant `put`"),
            "{msg}"
        );
        assert!(
            msg.contains("`mailbox`") && msg.contains("`accumulate`"),
            "{msg}"
        );
    }

    #[test]
    fn overrides_set_numbers_strings_arrays_and_tables() {
        let cfg = with(&[
            "run.epochs=2",
            "optim.lr=0.1",
            "run.seed = 7",
            "data.dir=/scratch/mnist",
            "sync.mode=ssp",
            "run.name=\"quoted name\"",
            "sync.gssp.static_groups=[[2,3],[4]]",
            "optim.lr_decay_epochs=[1.5, 3]",
            "data.synthetic.train=100",
            "heterogeneity.tiers=[{factor = 2.0, workers = 3}]",
            "model.mlp_hidden=[]",
        ])
        .unwrap();
        assert_eq!(cfg.run.epochs, 2.0);
        assert_eq!(cfg.optim.lr, 0.1);
        assert_eq!(cfg.run.seed, 7);
        assert_eq!(cfg.data.dir, "/scratch/mnist");
        assert_eq!(cfg.sync.mode, SyncMode::Ssp);
        assert_eq!(cfg.run.name, "quoted name");
        assert_eq!(cfg.sync.gssp.static_groups, vec![vec![2, 3], vec![4]]);
        assert_eq!(cfg.optim.lr_decay_epochs, vec![1.5, 3.0]);
        assert_eq!(cfg.data.synthetic.train, 100);
        // Keys of the table not overridden keep their defaults.
        assert_eq!(cfg.data.synthetic.test, 512);
        assert_eq!(
            cfg.heterogeneity.tiers,
            vec![SpeedTier {
                factor: 2.0,
                workers: 3
            }]
        );
        assert!(cfg.model.mlp_hidden.is_empty());
    }

    #[test]
    fn overrides_replace_file_values_and_inline_tables() {
        let text = format!("{MINIMAL}[optim]\nlr = 0.3\n");
        let cfg = Config::from_str_with_overrides(
            &text,
            "f",
            &["optim.lr=0.2".into(), "data.synthetic={ train = 9 }".into()],
        )
        .unwrap();
        assert_eq!(cfg.optim.lr, 0.2);
        assert_eq!(cfg.data.synthetic.train, 9);
        assert_eq!(cfg.data.synthetic.classes, 10);
        // Later overrides win.
        let cfg = with(&["run.seed=1", "run.seed=2"]).unwrap();
        assert_eq!(cfg.run.seed, 2);
    }

    #[test]
    fn bad_overrides_are_rejected_by_name() {
        let msg = with(&["run.epochs"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid override `run.epochs`: expected dotted.key=VALUE"
        );
        let msg = with(&["=3"]).unwrap_err().to_string();
        assert_eq!(msg, "invalid override `=3`: the key before `=` is empty");
        let msg = with(&["run..epochs=3"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid override `run..epochs=3`: the key has an empty segment"
        );
        let msg = with(&["run.epochs=2", "run.epochs.x=3"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "invalid override `run.epochs.x=3`: run.epochs is not a table"
        );
        // A table where a number belongs is a type error naming the key.
        let msg = with(&["run.epochs.x=3"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "test.toml (with overrides): run.epochs: invalid type: map, expected f64"
        );
        let msg = with(&["optim.lrr=0.1"]).unwrap_err().to_string();
        assert!(msg.starts_with("override: unknown key optim.lrr "), "{msg}");
        let msg = with(&["nosuch.section.key=1"]).unwrap_err().to_string();
        assert!(msg.starts_with("override: unknown key nosuch "), "{msg}");
    }

    #[test]
    fn override_values_parse_as_toml_or_fall_back_to_string() {
        assert_eq!(parse_override_value("2"), Value::Integer(2));
        assert_eq!(parse_override_value("2.5"), Value::Float(2.5));
        assert_eq!(parse_override_value("true"), Value::Boolean(true));
        assert_eq!(parse_override_value("ssp"), Value::String("ssp".into()));
        assert_eq!(parse_override_value("\"2\""), Value::String("2".into()));
        assert_eq!(parse_override_value(""), Value::String(String::new()));
        assert_eq!(
            parse_override_value("1\nx = 2"),
            Value::String("1\nx = 2".into())
        );
    }
}
