//! What the live tests and their replays share: the few-shot history that makes the tiny
//! model call its weather tool, that tool, and the types of the structured answers.

use pagent::{AssistantMessage, ContentBlock, Message, StopReason, ToolCall, ToolOutput, tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// A few-shot history that makes the tiny model call the tool (see the server's README).
pub fn few_shot() -> Vec<Message> {
    let call = |id: &str, city: &str| {
        Message::Assistant(AssistantMessage::new(
            vec![ContentBlock::ToolCall(ToolCall::new(
                id,
                "get_weather",
                json!({"city": city}).to_string(),
            ))],
            StopReason::ToolUse,
        ))
    };
    vec![
        Message::user("Weather in London?"),
        call("call_1", "London"),
        Message::user("Weather in Berlin?"),
        call("call_2", "Berlin"),
        Message::user("Weather in Paris?"),
    ]
}

// The weather tool's arguments (no doc comment: it would be the schema's description).
#[derive(Deserialize, JsonSchema)]
pub struct City {
    /// City name
    pub city: String,
}

/// The live tests' weather tool: its result is JSON.
pub fn weather_json() -> impl pagent::Tool {
    tool::typed(
        "get_weather",
        "Get the current weather for a city",
        |args: City, _| {
            Ok(ToolOutput::text(format!(
                "{{\"city\":\"{}\",\"temp_c\":21}}",
                args.city
            )))
        },
    )
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Sky {
    Sunny,
    Cloudy,
    Rainy,
}

/// Today's weather in a city.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
pub struct Forecast {
    pub sky: Sky,
    pub warm: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub enum Cell {
    X,
    O,
    Empty,
}

/// A tic-tac-toe board: up to three rows of three cells (arrays in an array).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Board {
    #[schemars(length(min = 1, max = 3))]
    pub rows: Vec<[Cell; 3]>,
}
