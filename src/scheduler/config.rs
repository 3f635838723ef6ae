//! The scheduler configuration file (`--config`, scheduler.md §1.1): profiles, the plugins of each
//! extension point, per-plugin args, and the two cluster percentages; its defaulting and its
//! validation.
//!
//! Upstream: `pkg/scheduler/apis/{types,defaults,default_plugins,validation}.go` plus the checks
//! `framework/runtime.NewFramework` makes while building a profile. Go reads the file with
//! `gopkg.in/yaml.v2`, which maps fields without a `yaml` tag to their lower-cased Go names: that
//! is why the two percentages are spelled `percentageofclusterstoscore` and
//! `percentageofclusterstotolerate`. Unknown keys (`apiVersion`, `kind`, a camel-cased
//! percentage...) are ignored, as yaml.v2 does.
//!
//! Plugin-level checks that need the plugins themselves (does it exist, does it implement that
//! extension point, do its args parse) happen in [`Framework::new`]; [`Profiles::new`] runs
//! both and reports every problem at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::framework::{Framework, FrameworkOptions, Registry};
use super::plugins::names;
use crate::apis::Subscription;
use crate::kube_ext::yaml::{self, YamlError};

/// Profile name used when a single profile has none, and the Subscription default.
pub const DEFAULT_SCHEDULER_NAME: &str = "default";
/// Default `percentageofclusterstoscore`: 0 means adaptive.
pub const DEFAULT_PERCENTAGE_OF_CLUSTERS_TO_SCORE: i32 = 0;
/// Default `percentageofclusterstotolerate`.
pub const DEFAULT_PERCENTAGE_OF_CLUSTERS_TO_TOLERATE: i32 = 10;

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not valid YAML for this schema.
    #[error("parsing scheduler configuration: {0}")]
    Parse(#[from] YamlError),
    /// One or more validation problems, each prefixed with its field path.
    #[error("invalid scheduler configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfiguration {
    /// Scheduling profiles; a Subscription picks one by `spec.schedulerName`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<SchedulerProfile>,

    /// Percentage of candidate clusters that, once found feasible, stops filtering (Dividing
    /// with >= 100 candidates only); `<= 0` means adaptive.
    #[serde(
        default,
        rename = "percentageofclusterstoscore",
        skip_serializing_if = "Option::is_none"
    )]
    pub percentage_of_clusters_to_score: Option<i32>,

    /// Predictor failures tolerated with gate `FeasibleClustersToleration`:
    /// `feasible clusters * this` (Go does not divide by 100).
    #[serde(
        default,
        rename = "percentageofclusterstotolerate",
        skip_serializing_if = "Option::is_none"
    )]
    pub percentage_of_clusters_to_tolerate: Option<i32>,
}

/// One profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerProfile {
    /// The `spec.schedulerName` this profile handles.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// Plugins per extension point (merged with the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    /// Arguments per plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_config: Vec<PluginConfig>,
}

/// Plugin sets of every extension point.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_filter: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub filter: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub post_filter: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_predict: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub predict: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_score: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub score: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_assign: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub assign: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub reserve: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub permit: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub pre_bind: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub bind: PluginSet,
    #[serde(default, skip_serializing_if = "PluginSet::is_empty")]
    pub post_bind: PluginSet,
}

/// Enabled and disabled plugins of one extension point.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSet {
    /// Enabled plugins: replace a default of the same name in place, else appended after the
    /// defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enabled: Vec<PluginRef>,
    /// Default plugins to drop; `*` drops them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<PluginRef>,
}

impl PluginSet {
    fn is_empty(&self) -> bool {
        self.enabled.is_empty() && self.disabled.is_empty()
    }

    fn of(names: &[(&str, i32)]) -> Self {
        Self {
            enabled: names
                .iter()
                .map(|(name, weight)| PluginRef {
                    name: (*name).to_owned(),
                    weight: *weight,
                })
                .collect(),
            disabled: Vec::new(),
        }
    }
}

/// A plugin reference (Go's `Plugin`): name and, for score plugins, weight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginRef {
    /// Registry name.
    #[serde(default)]
    pub name: String,
    /// Score weight (score plugins only; must be non-zero there).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub weight: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Arguments for one plugin, any YAML (kept as JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginConfig {
    /// Plugin name.
    #[serde(default)]
    pub name: String,
    /// Arguments passed to the plugin's constructor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
}

/// Extension-point keys in configuration order, with accessors; one list drives merging and
/// validation so no point can be forgotten.
pub(crate) type PluginSetField = (&'static str, fn(&Plugins) -> &PluginSet);

pub(crate) const EXTENSION_POINT_FIELDS: [PluginSetField; 14] = [
    ("preFilter", |p| &p.pre_filter),
    ("filter", |p| &p.filter),
    ("postFilter", |p| &p.post_filter),
    ("prePredict", |p| &p.pre_predict),
    ("predict", |p| &p.predict),
    ("preScore", |p| &p.pre_score),
    ("score", |p| &p.score),
    ("preAssign", |p| &p.pre_assign),
    ("assign", |p| &p.assign),
    ("reserve", |p| &p.reserve),
    ("permit", |p| &p.permit),
    ("preBind", |p| &p.pre_bind),
    ("bind", |p| &p.bind),
    ("postBind", |p| &p.post_bind),
];

impl Plugins {
    /// The default plugins (`pkg/scheduler/apis/default_plugins.go`).
    pub fn defaults() -> Self {
        Self {
            filter: PluginSet::of(&[(names::TAINT_TOLERATION, 0)]),
            predict: PluginSet::of(&[(names::PREDICTOR, 0)]),
            score: PluginSet::of(&[(names::TAINT_TOLERATION, 3)]),
            pre_assign: PluginSet::of(&[(names::DYNAMIC_ASSIGNER, 0)]),
            assign: PluginSet::of(&[(names::STATIC_ASSIGNER, 0), (names::DYNAMIC_ASSIGNER, 0)]),
            bind: PluginSet::of(&[(names::DEFAULT_BINDER, 0)]),
            ..Self::default()
        }
    }

    /// Merges `custom` into `defaults` point by point, like kube-scheduler's `mergePlugins`.
    pub fn merge(defaults: &Plugins, custom: Option<&Plugins>) -> Plugins {
        let Some(custom) = custom else {
            return defaults.clone();
        };
        let m = merge_plugin_set;
        Plugins {
            pre_filter: m(&defaults.pre_filter, &custom.pre_filter),
            filter: m(&defaults.filter, &custom.filter),
            post_filter: m(&defaults.post_filter, &custom.post_filter),
            pre_predict: m(&defaults.pre_predict, &custom.pre_predict),
            predict: m(&defaults.predict, &custom.predict),
            pre_score: m(&defaults.pre_score, &custom.pre_score),
            score: m(&defaults.score, &custom.score),
            pre_assign: m(&defaults.pre_assign, &custom.pre_assign),
            assign: m(&defaults.assign, &custom.assign),
            reserve: m(&defaults.reserve, &custom.reserve),
            permit: m(&defaults.permit, &custom.permit),
            pre_bind: m(&defaults.pre_bind, &custom.pre_bind),
            bind: m(&defaults.bind, &custom.bind),
            post_bind: m(&defaults.post_bind, &custom.post_bind),
        }
    }

    /// Every enabled plugin name, sorted and de-duplicated.
    pub fn names(&self) -> BTreeSet<&str> {
        EXTENSION_POINT_FIELDS
            .iter()
            .flat_map(|(_, get)| get(self).enabled.iter().map(|p| p.name.as_str()))
            .collect()
    }
}

/// kube-scheduler's `mergePluginSet`: `*` in `disabled` drops every default; a default named in
/// `disabled` is dropped; a default re-enabled by name is replaced in place (keeping its
/// position, taking the custom weight); other enabled plugins follow in their order. Duplicates
/// in `enabled` survive so that validation can report them.
fn merge_plugin_set(defaults: &PluginSet, custom: &PluginSet) -> PluginSet {
    let disabled: BTreeSet<&str> = custom.disabled.iter().map(|p| p.name.as_str()).collect();
    // The last occurrence wins the replacement, like Go's map assignment.
    let mut custom_index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, p) in custom.enabled.iter().enumerate() {
        custom_index.insert(p.name.as_str(), i);
    }
    let mut replaced = BTreeSet::new();
    let mut enabled = Vec::new();
    if !disabled.contains("*") {
        for default in &defaults.enabled {
            if disabled.contains(default.name.as_str()) {
                continue;
            }
            match custom_index.get(default.name.as_str()) {
                Some(&i) => {
                    replaced.insert(i);
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(default.clone()),
            }
        }
    }
    for (i, p) in custom.enabled.iter().enumerate() {
        if !replaced.contains(&i) {
            enabled.push(p.clone());
        }
    }
    PluginSet {
        enabled,
        disabled: Vec::new(),
    }
}

impl SchedulerConfiguration {
    /// Parses a configuration file and applies the defaults. An empty document is the default
    /// configuration.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let mut config: SchedulerConfiguration = if text.trim().is_empty() {
            Self::default()
        } else {
            yaml::from_str::<Option<SchedulerConfiguration>>(text)?.unwrap_or_default()
        };
        config.set_defaults();
        Ok(config)
    }

    /// The configuration used without `--config`: one `default` profile with the default plugins.
    pub fn defaulted() -> Self {
        let mut config = Self::default();
        config.set_defaults();
        config
    }

    /// Go's `SetDefaultsSchedulerConfiguration`.
    pub fn set_defaults(&mut self) {
        if self.profiles.is_empty() {
            self.profiles.push(SchedulerProfile::default());
        }
        // Only a lone profile gets a name; several unnamed profiles fail validation instead.
        if let [only] = self.profiles.as_mut_slice()
            && only.scheduler_name.is_empty()
        {
            DEFAULT_SCHEDULER_NAME.clone_into(&mut only.scheduler_name);
        }
        self.percentage_of_clusters_to_score
            .get_or_insert(DEFAULT_PERCENTAGE_OF_CLUSTERS_TO_SCORE);
        self.percentage_of_clusters_to_tolerate
            .get_or_insert(DEFAULT_PERCENTAGE_OF_CLUSTERS_TO_TOLERATE);
        let defaults = Plugins::defaults();
        for profile in &mut self.profiles {
            profile.plugins = Some(Plugins::merge(&defaults, profile.plugins.as_ref()));
        }
    }

    /// Structural checks that need no plugin: at least one profile, unique non-empty names,
    /// plugins present, no duplicate `pluginConfig`, score weights non-zero. Returns every
    /// problem found.
    pub fn validation_errors(&self) -> Vec<String> {
        let mut errs = Vec::new();
        if self.profiles.is_empty() {
            errs.push("profiles: Required value: at least one profile is needed".to_owned());
        }
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, profile) in self.profiles.iter().enumerate() {
            let path = format!("profiles[{i}]");
            if profile.scheduler_name.is_empty() {
                errs.push(format!("{path}.schedulerName: Required value"));
            } else if let Some(first) = seen.insert(&profile.scheduler_name, i) {
                errs.push(format!(
                    "{path}.schedulerName: Duplicate value: {:?} (also profiles[{first}])",
                    profile.scheduler_name
                ));
            }
            let mut configs = BTreeSet::new();
            for (j, pc) in profile.plugin_config.iter().enumerate() {
                if !configs.insert(pc.name.as_str()) {
                    errs.push(format!(
                        "{path}.pluginConfig[{j}]: repeated config for plugin {:?}",
                        pc.name
                    ));
                }
            }
            let Some(plugins) = &profile.plugins else {
                errs.push(format!(
                    "{path}.plugins: Required value: a profile must have plugins"
                ));
                continue;
            };
            if plugins.names().is_empty() {
                errs.push(format!(
                    "{path}.plugins: Required value: a profile must enable at least one plugin"
                ));
            }
            for (key, get) in EXTENSION_POINT_FIELDS {
                let mut names = BTreeSet::new();
                for (j, p) in get(plugins).enabled.iter().enumerate() {
                    let at = format!("{path}.plugins.{key}.enabled[{j}]");
                    if p.name.is_empty() {
                        errs.push(format!("{at}.name: Required value"));
                    } else if !names.insert(p.name.as_str()) {
                        errs.push(format!("{at}: plugin {:?} is enabled twice", p.name));
                    }
                    if key == "score" && p.weight == 0 {
                        errs.push(format!(
                            "{at}: score plugin {:?} is not configured with weight",
                            p.name
                        ));
                    }
                }
            }
            if plugins.bind.enabled.is_empty() {
                errs.push(format!(
                    "{path}.plugins.bind: Required value: at least one bind plugin is needed"
                ));
            }
        }
        errs
    }

    /// [`Self::validation_errors`] as a result.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let errs = self.validation_errors();
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(errs))
        }
    }
}

/// Every profile built into a [`Framework`], by scheduler name (Go's `profile.Map`).
#[derive(Clone, Debug)]
pub struct Profiles {
    frameworks: BTreeMap<String, Arc<Framework>>,
}

impl Profiles {
    /// Validates a defaulted configuration against `registry` and builds one framework per
    /// profile. `feasible_clusters_toleration` is the feature gate of that name.
    pub fn new(
        config: &SchedulerConfiguration,
        registry: &Registry,
        feasible_clusters_toleration: bool,
    ) -> Result<Self, ConfigError> {
        let mut errs = config.validation_errors();
        let options = FrameworkOptions {
            percentage_of_clusters_to_score: config
                .percentage_of_clusters_to_score
                .unwrap_or(DEFAULT_PERCENTAGE_OF_CLUSTERS_TO_SCORE),
            percentage_of_clusters_to_tolerate: config
                .percentage_of_clusters_to_tolerate
                .unwrap_or(DEFAULT_PERCENTAGE_OF_CLUSTERS_TO_TOLERATE),
            feasible_clusters_toleration,
            ..FrameworkOptions::default()
        };
        let mut frameworks = BTreeMap::new();
        for (i, profile) in config.profiles.iter().enumerate() {
            match Framework::new(profile, registry, options.clone()) {
                Ok(fwk) => {
                    frameworks.insert(profile.scheduler_name.clone(), Arc::new(fwk));
                }
                Err(problems) => {
                    for problem in problems {
                        let problem = format!("profiles[{i}].{problem}");
                        // Structural checks may have reported the same problem already.
                        if !errs.contains(&problem) {
                            errs.push(problem);
                        }
                    }
                }
            }
        }
        if !errs.is_empty() {
            return Err(ConfigError::Invalid(errs));
        }
        Ok(Self { frameworks })
    }

    /// Parses, defaults, validates and builds in one step (`None` = no `--config`).
    pub fn from_yaml(
        text: Option<&str>,
        registry: &Registry,
        feasible_clusters_toleration: bool,
    ) -> Result<(SchedulerConfiguration, Self), ConfigError> {
        let config = match text {
            Some(text) => SchedulerConfiguration::from_yaml(text)?,
            None => SchedulerConfiguration::defaulted(),
        };
        let profiles = Self::new(&config, registry, feasible_clusters_toleration)?;
        Ok((config, profiles))
    }

    /// The framework of a scheduler name.
    pub fn get(&self, scheduler_name: &str) -> Option<&Arc<Framework>> {
        self.frameworks.get(scheduler_name)
    }

    /// The framework that handles this Subscription (`spec.schedulerName`, `default` when
    /// unset); `None` means the Subscription is not ours.
    pub fn for_subscription(&self, sub: &Subscription) -> Option<&Arc<Framework>> {
        self.get(sub.spec.effective_scheduler_name())
    }

    /// Does a profile handle this scheduler name?
    pub fn handles(&self, scheduler_name: &str) -> bool {
        self.frameworks.contains_key(scheduler_name)
    }

    /// Profile names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.frameworks.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::plugins::testing::fake_registry;

    fn enabled(set: &PluginSet) -> Vec<(&str, i32)> {
        set.enabled
            .iter()
            .map(|p| (p.name.as_str(), p.weight))
            .collect()
    }

    #[test]
    fn empty_file_is_the_default_profile() {
        for text in ["", "   \n", "{}", "null", "profiles: []"] {
            let config = SchedulerConfiguration::from_yaml(text).expect("parses");
            assert_eq!(config, SchedulerConfiguration::defaulted(), "{text:?}");
        }
        let config = SchedulerConfiguration::defaulted();
        assert_eq!(config.profiles.len(), 1);
        assert_eq!(config.profiles[0].scheduler_name, "default");
        assert_eq!(config.percentage_of_clusters_to_score, Some(0));
        assert_eq!(config.percentage_of_clusters_to_tolerate, Some(10));
        let plugins = config.profiles[0].plugins.as_ref().expect("defaulted");
        assert_eq!(enabled(&plugins.filter), [("TaintToleration", 0)]);
        assert_eq!(enabled(&plugins.predict), [("Predictor", 0)]);
        assert_eq!(enabled(&plugins.score), [("TaintToleration", 3)]);
        assert_eq!(enabled(&plugins.pre_assign), [("DynamicAssigner", 0)]);
        assert_eq!(
            enabled(&plugins.assign),
            [("StaticAssigner", 0), ("DynamicAssigner", 0)]
        );
        assert_eq!(enabled(&plugins.bind), [("DefaultBinder", 0)]);
        assert!(plugins.pre_filter.enabled.is_empty() && plugins.permit.enabled.is_empty());
        assert!(config.validate().is_ok());
        let profiles = Profiles::new(&config, &fake_registry(), false).expect("builds");
        assert!(profiles.handles("default"));
    }

    #[test]
    fn spec_example_parses_with_gos_key_spelling() {
        let text = r#"
apiVersion: ignored/v1
kind: Ignored
profiles:
  - schedulerName: default
    plugins:
      filter:   {enabled: [{name: TaintToleration}], disabled: []}
      predict:  {enabled: [{name: Predictor}]}
      score:    {enabled: [{name: TaintToleration, weight: 3}]}
      preAssign: {enabled: [{name: DynamicAssigner}]}
      assign:   {enabled: [{name: StaticAssigner}, {name: DynamicAssigner}]}
      bind:     {enabled: [{name: DefaultBinder}]}
    pluginConfig:
      - name: SomePlugin
        args: {any: yaml, list: [1, 2]}
percentageofclusterstoscore: 0
percentageofclusterstotolerate: 10
"#;
        let config = SchedulerConfiguration::from_yaml(text).expect("parses");
        // Re-enabling every default by name changes nothing.
        assert_eq!(
            config.profiles[0].plugins,
            SchedulerConfiguration::defaulted().profiles[0].plugins
        );
        assert_eq!(
            config.profiles[0].plugin_config[0].args,
            Some(serde_json::json!({"any": "yaml", "list": [1, 2]}))
        );
        Profiles::new(&config, &fake_registry(), false).expect("valid");

        let text = "percentageofclusterstoscore: 30\npercentageofclusterstotolerate: 2\n\
                    percentageOfClustersToScore: 99\n";
        let config = SchedulerConfiguration::from_yaml(text).expect("parses");
        assert_eq!(config.percentage_of_clusters_to_score, Some(30));
        assert_eq!(config.percentage_of_clusters_to_tolerate, Some(2));
    }

    #[test]
    fn merge_like_kube_scheduler() {
        let defaults = Plugins::defaults();
        // Disable all assign defaults, then enable in a new order.
        let custom: Plugins = yaml::from_str(
            "assign: {disabled: [{name: '*'}], enabled: [{name: DynamicAssigner}, {name: StaticAssigner}]}\n\
             score: {enabled: [{name: TaintToleration, weight: 5}, {name: Extra, weight: 1}]}\n\
             filter: {disabled: [{name: TaintToleration}]}\n\
             bind: {enabled: [{name: MyBinder}]}",
        )
        .expect("parses");
        let merged = Plugins::merge(&defaults, Some(&custom));
        assert_eq!(
            enabled(&merged.assign),
            [("DynamicAssigner", 0), ("StaticAssigner", 0)]
        );
        // Replaced in place (new weight), other plugins appended.
        assert_eq!(
            enabled(&merged.score),
            [("TaintToleration", 5), ("Extra", 1)]
        );
        assert!(merged.filter.enabled.is_empty());
        assert_eq!(
            enabled(&merged.bind),
            [("DefaultBinder", 0), ("MyBinder", 0)]
        );
        // Untouched points keep their defaults.
        assert_eq!(enabled(&merged.predict), [("Predictor", 0)]);
        assert!(merged.bind.disabled.is_empty());
    }

    #[test]
    fn several_profiles_and_their_names() {
        let text = "profiles: [{schedulerName: a}, {schedulerName: b, plugins: {filter: {disabled: [{name: '*'}]}}}]";
        let config = SchedulerConfiguration::from_yaml(text).expect("parses");
        let profiles = Profiles::new(&config, &fake_registry(), false).expect("valid");
        assert_eq!(profiles.names().collect::<Vec<_>>(), ["a", "b"]);
        assert!(profiles.get("b").is_some_and(|f| !f.has_filter_plugins()));
        assert!(profiles.get("a").is_some_and(|f| f.has_filter_plugins()));
        assert!(!profiles.handles("default"));
    }

    fn invalid(text: &str) -> Vec<String> {
        let config = SchedulerConfiguration::from_yaml(text).expect("parses");
        match Profiles::new(&config, &fake_registry(), false) {
            Err(ConfigError::Invalid(errs)) => errs,
            other => panic!("expected invalid for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn validation_errors() {
        assert_eq!(
            invalid("profiles: [{schedulerName: a}, {}]"),
            ["profiles[1].schedulerName: Required value"]
        );
        assert_eq!(
            invalid("profiles: [{schedulerName: a}, {schedulerName: a}]"),
            ["profiles[1].schedulerName: Duplicate value: \"a\" (also profiles[0])"]
        );
        assert_eq!(
            invalid("profiles: [{plugins: {filter: {enabled: [{name: Nope}]}}}]"),
            ["profiles[0].plugins.filter.enabled[1]: plugin \"Nope\" does not exist"]
        );
        assert_eq!(
            invalid(
                "profiles: [{plugins: {score: {enabled: [{name: DefaultBinder, weight: 1}]}}}]"
            ),
            [
                "profiles[0].plugins.score.enabled[1]: plugin \"DefaultBinder\" does not extend Score plugin"
            ]
        );
        assert_eq!(
            invalid(
                "profiles: [{plugins: {score: {disabled: [{name: '*'}], enabled: [{name: TaintToleration}]}}}]"
            ),
            [
                "profiles[0].plugins.score.enabled[0]: score plugin \"TaintToleration\" is not configured with weight"
            ]
        );
        assert_eq!(
            invalid(
                "profiles: [{plugins: {filter: {enabled: [{name: TaintToleration}, {name: TaintToleration}]}}}]"
            ),
            ["profiles[0].plugins.filter.enabled[1]: plugin \"TaintToleration\" is enabled twice"]
        );
        assert_eq!(
            invalid("profiles: [{plugins: {bind: {disabled: [{name: '*'}]}}}]"),
            ["profiles[0].plugins.bind: Required value: at least one bind plugin is needed"]
        );
        assert_eq!(
            invalid("profiles: [{pluginConfig: [{name: X}, {name: X}]}]"),
            ["profiles[0].pluginConfig[1]: repeated config for plugin \"X\""]
        );
        // Everything at once is reported at once.
        let errs = invalid(
            "profiles: [{}, {}, {schedulerName: x, plugins: {bind: {disabled: [{name: '*'}]}}}]",
        );
        assert_eq!(errs.len(), 3, "{errs:?}");
        let err = ConfigError::Invalid(errs).to_string();
        assert!(
            err.starts_with(
                "invalid scheduler configuration: profiles[0].schedulerName: Required value; "
            ),
            "{err}"
        );
    }

    #[test]
    fn plugin_args_reach_the_constructor() {
        let text = "profiles: [{plugins: {filter: {enabled: [{name: Picky}]}}, pluginConfig: [{name: Picky, args: {bad: true}}]}]";
        let config = SchedulerConfiguration::from_yaml(text).expect("parses");
        let mut registry = fake_registry();
        registry
            .register("Picky", |args: &serde_json::Value| {
                if args.get("bad").is_some() {
                    Err("bad args".to_owned())
                } else {
                    Ok(Arc::new(crate::scheduler::plugins::testing::Noop("Picky"))
                        as Arc<dyn crate::scheduler::framework::Plugin>)
                }
            })
            .expect("registers");
        match Profiles::new(&config, &registry, false) {
            Err(ConfigError::Invalid(errs)) => assert_eq!(
                errs,
                ["profiles[0].plugins: initializing plugin \"Picky\": bad args"]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_is_a_parse_error() {
        assert!(matches!(
            SchedulerConfiguration::from_yaml("profiles: 5"),
            Err(ConfigError::Parse(_))
        ));
    }
}
