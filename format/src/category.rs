//! [`Category`]: what a block holds, as the program uses it (parameters,
//! gradients, activations...), which a tag event names by its code and the
//! analyses total by.

use serde::{Deserialize, Serialize};

/// What a block holds, as the program uses it. The discriminants are the
/// codes used on disk (a [`TagEvent`](crate::TagEvent)'s `code`) and never change.
/// As JSON, the [`name`](Category::name) (`"optimizer_state"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[repr(u8)]
#[non_exhaustive]
pub enum Category {
    /// A module's parameter (`nn.Parameter`), sharded or not.
    #[serde(rename = "parameters")]
    Parameter = 0,
    /// A module's buffer (`register_buffer`: running statistics, masks).
    #[serde(rename = "buffers")]
    Buffer = 1,
    /// A parameter's gradient (`.grad`), or a buffer gradients are reduced in.
    #[serde(rename = "gradients")]
    Gradient = 2,
    /// An optimizer's state (Adam's moments, momentum buffers, step counts).
    #[serde(rename = "optimizer_state")]
    OptimizerState = 3,
    /// A tensor the forward pass saved for the backward pass.
    #[serde(rename = "activations")]
    Activation = 4,
    /// A tensor made and freed within one part of a step.
    #[serde(rename = "temporaries")]
    Temporary = 5,
    /// Anything else: inputs, outputs kept, caches, what could not be told.
    #[serde(rename = "other")]
    Other = 6,
}

impl Category {
    /// Every category, in code order (the order tables show them in).
    pub const ALL: [Category; 7] = [
        Category::Parameter,
        Category::Buffer,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Temporary,
        Category::Other,
    ];

    /// The number of categories this version knows.
    pub const COUNT: usize = Self::ALL.len();

    /// The category with this on-disk code, if this version knows it.
    pub fn from_code(code: u8) -> Option<Category> {
        Self::ALL.get(code as usize).copied()
    }

    /// The on-disk code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The snake_case name used in JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameters",
            Category::Buffer => "buffers",
            Category::Gradient => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activations",
            Category::Temporary => "temporaries",
            Category::Other => "other",
        }
    }

    /// The name people read in tables and legends.
    pub fn label(self) -> &'static str {
        match self {
            Category::Parameter => "parameters",
            Category::Buffer => "buffers",
            Category::Gradient => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activation => "activations",
            Category::Temporary => "temporaries",
            Category::Other => "other",
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}
