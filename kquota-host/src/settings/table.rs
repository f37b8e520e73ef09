//! A server's table of settings: every key it takes, the flag that sets it, its default and what
//! it does. `--help`, the "did you mean" of a misspelt key, the errors that name a flag and the
//! test that every key is documented all read the one table.

use super::error::SettingError;

/// One setting: its key, the flag that sets it, its default and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The key, as a properties file names it. A key ending in `.*` stands for every key with
    /// that prefix (`kquota.cluster.client.*`).
    pub key: &'static str,
    /// The flag that sets it (`--max-request-bytes`), if the binary has one.
    pub flag: Option<&'static str>,
    /// The default, as the key's value would be written; `None`: not set unless given.
    pub default: Option<&'static str>,
    /// What it sets, in a line.
    pub help: &'static str,
}

impl Setting {
    /// A setting with no flag and no default.
    pub const fn key(key: &'static str, help: &'static str) -> Setting {
        Setting {
            key,
            flag: None,
            default: None,
            help,
        }
    }

    /// The same setting, set by `flag` too.
    pub const fn flag(self, flag: &'static str) -> Setting {
        Setting {
            flag: Some(flag),
            ..self
        }
    }

    /// The same setting, with `default` when not given.
    pub const fn default(self, default: &'static str) -> Setting {
        Setting {
            default: Some(default),
            ..self
        }
    }

    /// Whether `key` is this setting (or, for a `prefix.*` setting, one of its keys).
    pub fn is(&self, key: &str) -> bool {
        match self.key.strip_suffix('*') {
            Some(prefix) => key.len() > prefix.len() && key.starts_with(prefix),
            None => self.key == key,
        }
    }
}

/// A server's settings, in the order its `--help` lists them.
#[derive(Clone, Copy, Debug)]
pub struct Settings(pub &'static [Setting]);

impl Settings {
    /// Every setting.
    pub fn iter(&self) -> impl Iterator<Item = &'static Setting> {
        self.0.iter()
    }

    /// The setting `key` is, if the server takes it.
    pub fn find(&self, key: &str) -> Option<&'static Setting> {
        self.0.iter().find(|s| s.is(key))
    }

    /// The setting `flag` sets.
    pub fn by_flag(&self, flag: &str) -> Option<&'static Setting> {
        self.0.iter().find(|s| s.flag == Some(flag))
    }

    /// The flag that sets `key`, if there is one.
    pub fn flag_of(&self, key: &str) -> Option<&'static str> {
        self.find(key).and_then(|s| s.flag)
    }

    /// `key` is not a setting: the error, with the known key nearest it.
    pub fn unknown(&self, key: &str) -> SettingError {
        SettingError::Unknown {
            key: key.to_owned(),
            nearest: crate::exit::nearest(key, self.0.iter().map(|s| s.key)),
        }
    }

    /// A known `key` of a feature `program` was built without: why it is refused (`None`: `key`
    /// is not a setting at all).
    pub fn not_built(
        &self,
        key: &str,
        program: &'static str,
        feature: &'static str,
    ) -> Option<super::error::Problem> {
        self.find(key)
            .map(|_| super::error::Problem::NotBuilt { program, feature })
    }

    /// `key` was given without `needs`: the error, naming their flags.
    pub fn needs(&self, key: &'static str, needs: &'static str) -> SettingError {
        SettingError::Needs {
            key,
            key_flag: self.flag_of(key),
            needs,
            needs_flag: self.flag_of(needs),
        }
    }

    /// `--help`'s list of every key, with its default and what it sets.
    pub fn help(&self) -> String {
        let width = self.0.iter().map(|s| s.key.len()).max().unwrap_or(0);
        let mut out =
            String::from("Every setting (a properties-file key; flags set the same):\n\n");
        for s in self.0 {
            out.push_str(&format!("  {:width$}  {}", s.key, s.help));
            if let Some(default) = s.default {
                out.push_str(&format!(" [default: {default}]"));
            }
            out.push('\n');
        }
        out
    }

    /// The keys `doc` does not name (as `` `key` ``) and those with no help: what a test of each
    /// server asks to be empty, so that no setting goes undocumented.
    pub fn undocumented(&self, doc: &str) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|s| s.help.trim().is_empty() || !doc.contains(&format!("`{}`", s.key)))
            .map(|s| s.key)
            .collect()
    }

    /// Checks a document's table of settings against this one, for each server's test: its rows
    /// (`` | `key` | `--flag VALUE` | `default` | what | ``, `—` for no flag) name the same keys in
    /// the same order, each with this table's flag and, where this table has one, its default; and
    /// every key has help. The error says the first difference.
    pub fn check_doc_table(&self, doc: &str) -> Result<(), String> {
        if let Some(key) = self.undocumented(doc).first() {
            return Err(format!(
                "{key} has no help, or the document does not name it"
            ));
        }
        let rows: Vec<Vec<&str>> = doc
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
            .collect();
        if rows.len() != self.0.len() {
            return Err(format!("{} rows for {} settings", rows.len(), self.0.len()));
        }
        for (s, row) in self.0.iter().zip(&rows) {
            let cell = |i: usize| row.get(i).copied().unwrap_or("");
            if cell(0).trim_matches('`') != s.key {
                return Err(format!(
                    "{} is documented as {} (or out of order)",
                    s.key,
                    cell(0)
                ));
            }
            let flag = cell(1)
                .trim_matches('`')
                .split([' ', '`'])
                .next()
                .unwrap_or("");
            if flag != s.flag.unwrap_or("—") {
                return Err(format!("{}: the document's flag is {}", s.key, cell(1)));
            }
            if let Some(default) = s.default {
                if cell(2) != format!("`{default}`") {
                    return Err(format!("{}: the document's default is {}", s.key, cell(2)));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: Settings = Settings(&[
        Setting::key("max.connections", "connections open at once")
            .flag("--max-connections")
            .default("1024"),
        Setting::key("kquota.cluster.client.*", "a client property").flag("--cluster-property"),
        Setting::key("log.format", "text or json"),
    ]);

    #[test]
    fn keys_flags_and_prefixes_are_found() {
        assert_eq!(TABLE.flag_of("max.connections"), Some("--max-connections"));
        assert_eq!(
            TABLE.flag_of("kquota.cluster.client.acks"),
            Some("--cluster-property")
        );
        assert_eq!(TABLE.find("kquota.cluster.client."), None);
        assert_eq!(TABLE.flag_of("log.format"), None);
        assert_eq!(
            TABLE.by_flag("--max-connections").unwrap().key,
            "max.connections"
        );
    }

    #[test]
    fn a_misspelt_key_gets_the_nearest_and_a_missing_one_names_flags() {
        assert_eq!(
            TABLE.unknown("max.conections").to_string(),
            "unknown setting 'max.conections' (did you mean max.connections?)"
        );
        assert_eq!(TABLE.unknown("zzz").to_string(), "unknown setting 'zzz'");
        assert_eq!(
            TABLE.needs("max.connections", "log.format").to_string(),
            "max.connections (--max-connections) needs log.format"
        );
    }

    #[test]
    fn a_documents_table_is_checked_row_by_row() {
        let good = "| `max.connections` | `--max-connections N` | `1024` | x |\n\
                    | `kquota.cluster.client.*` | `--cluster-property K=V` | — | y |\n\
                    | `log.format` | — | `text` | z |\n";
        TABLE.check_doc_table(good).unwrap();
        let wrong_default = good.replace("`1024`", "`10`");
        assert_eq!(
            TABLE.check_doc_table(&wrong_default).unwrap_err(),
            "max.connections: the document's default is `10`"
        );
        let wrong_flag = good.replace("| — | `text`", "| `--log` | `text`");
        assert_eq!(
            TABLE.check_doc_table(&wrong_flag).unwrap_err(),
            "log.format: the document's flag is `--log`"
        );
        let missing = good.replace("| `log.format` | — | `text` | z |\n", "");
        assert!(TABLE.check_doc_table(&missing).is_err());
    }

    #[test]
    fn help_lists_every_key_and_documentation_is_checked() {
        let help = TABLE.help();
        assert!(
            help.contains("max.connections          connections open at once [default: 1024]"),
            "{help}"
        );
        assert_eq!(
            TABLE.undocumented("`max.connections` and `log.format`"),
            ["kquota.cluster.client.*"]
        );
    }
}
