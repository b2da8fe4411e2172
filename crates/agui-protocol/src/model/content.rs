//! Message content: a string, or an array of multimodal content parts.

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::error::SchemaError;
use super::json::{FromValue, json_object, json_union, wrong_type};

json_object! {
    /// `{"type":"data","value":<base64>,"mimeType":...}`: bytes carried inline.
    tag "type" = "data";
    pub struct DataSource {
        /// `value`: the bytes, base64.
        "value" => value: String = req,
        /// `mimeType` (required here).
        "mimeType" => mime_type: String = req,
    }
}

json_object! {
    /// `{"type":"url","value":<url>}`: bytes referenced by URL.
    tag "type" = "url";
    pub struct UrlSource {
        /// `value`: the URL.
        "value" => value: String = req,
        /// `mimeType`.
        "mimeType" => mime_type: Option<String> = opt,
    }
}

json_object! {
    /// `{"type":"file","value":<handle>}`: an opaque handle a provider issued.
    tag "type" = "file";
    pub struct FileSource {
        /// `value`: the provider's handle (opaque).
        "value" => value: String = req,
        /// `provider`: the lowercase vendor id.
        "provider" => provider: Option<String> = opt,
        /// `mimeType`.
        "mimeType" => mime_type: Option<String> = opt,
    }
}

json_union! {
    /// A media part's `source`, discriminated by `type`.
    tag "type";
    pub enum PartSource {
        /// `data`
        Data(DataSource) = "data",
        /// `url`
        Url(UrlSource) = "url",
        /// `file`
        File(FileSource) = "file",
    }
}

json_object! {
    /// `{"type":"text","text":...}`.
    tag "type" = "text";
    pub struct TextPart {
        /// `id` (reserved).
        "id" => id: Option<String> = opt,
        /// `text`.
        "text" => text: String = req,
        /// `metadata`: anything but a bare `null`.
        "metadata" => metadata: Option<Value> = opt_non_null,
    }
}

macro_rules! media_part {
    ($(#[$meta:meta])* $name:ident = $tag:literal) => {
        json_object! {
            $(#[$meta])*
            tag "type" = $tag;
            pub struct $name {
                /// `id` (reserved).
                "id" => id: Option<String> = opt,
                /// `source`: where the bytes are.
                "source" => source: PartSource = req,
                /// `metadata`: anything but a bare `null` (not only objects).
                "metadata" => metadata: Option<Value> = opt_non_null,
            }
        }
    };
}

media_part!(
    /// `{"type":"image","source":...}`.
    ImagePart = "image"
);
media_part!(
    /// `{"type":"audio","source":...}`.
    AudioPart = "audio"
);
media_part!(
    /// `{"type":"video","source":...}`.
    VideoPart = "video"
);
media_part!(
    /// `{"type":"document","source":...}`.
    DocumentPart = "document"
);

json_union! {
    /// One part of a multimodal body, discriminated by `type`.
    tag "type";
    pub enum ContentPart {
        /// `text`
        Text(TextPart) = "text",
        /// `image`
        Image(ImagePart) = "image",
        /// `audio`
        Audio(AudioPart) = "audio",
        /// `video`
        Video(VideoPart) = "video",
        /// `document`
        Document(DocumentPart) = "document",
    }
}

/// A `content` that is a string or an array of content parts (user and tool
/// messages, `TOOL_CALL_RESULT`).
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Multimodal parts.
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The concatenated text parts (as `contentToText` in `@ag-ui/core`).
    pub fn to_text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect(),
        }
    }
}

impl From<String> for Content {
    fn from(s: String) -> Content {
        Content::Text(s)
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Content {
        Content::Text(s.to_owned())
    }
}

impl FromValue for Content {
    fn from_value(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::String(s) => Ok(Content::Text(s)),
            items @ Value::Array(_) => Vec::<ContentPart>::from_value(items).map(Content::Parts),
            other => Err(wrong_type("a string or an array of content parts", &other)),
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(s) => serializer.serialize_str(s),
            Content::Parts(parts) => parts.serialize(serializer),
        }
    }
}

json_object!(@deserialize Content);
