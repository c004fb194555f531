//! Errors: syntax errors with their line, `raise_exception` messages, bad inputs, template choice.

use std::path::Path;

use serde_json::{json, Value};
use vkformers_chat::{render, select_template, special_tokens_from_config, ChatError, Message, SpecialTokens};
use vkformers_io::TokenizerConfig;

fn run(template: &str) -> Result<String, ChatError> {
    render(template, &[Message::user("hi")], false, &SpecialTokens::default(), &Value::Null)
}

#[test]
fn syntax_error_names_the_line() {
    let template = "{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}";
    match run(template) {
        Err(ChatError::Syntax { line, line_text, .. }) => {
            assert_eq!(line, 3);
            assert_eq!(line_text, "{% if %}");
        }
        other => panic!("{other:?}"),
    }
    let text = run(template).unwrap_err().to_string();
    assert!(text.contains("line 3") && text.contains("{% if %}"), "{text}");
}

#[test]
fn raise_exception_message_is_surfaced() {
    let template = "{% for m in messages %}\n{% if m.role == 'user' %}\n{{ raise_exception('No users: ' ~ m.content) }}\n{% endif %}{% endfor %}";
    match run(template) {
        Err(ChatError::Raised { message, line }) => {
            assert_eq!(message, "No users: hi");
            assert_eq!(line, Some(3));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_failures_are_render_errors() {
    assert!(matches!(run("{{ messages | no_such_filter }}"), Err(ChatError::Render { .. })));
    assert!(matches!(run("{{ messages[0].content.no_such_method() }}"), Err(ChatError::Render { .. })));
}

#[test]
fn undefined_tokens_and_extra_variables() {
    // Unset special tokens are undefined, as in transformers.
    assert_eq!(run("[{{ bos_token }}]{{ bos_token is defined }}").unwrap(), "[]False"); // Python spelling, as Jinja2 prints it
    let special = SpecialTokens { bos_token: Some("<s>".into()), ..Default::default() };
    let extra = json!({"bos_token": "<B>", "enable_thinking": false});
    let out = render("{{ bos_token }}{{ enable_thinking }}{{ tools is none }}", &[], false, &special, &extra);
    assert_eq!(out.unwrap(), "<B>FalseTrue");
}

#[test]
fn bad_extra_variables_are_refused() {
    let none = SpecialTokens::default();
    assert!(matches!(render("", &[], false, &none, &json!([1])), Err(ChatError::ExtraNotObject(_))));
    let extra = json!({"messages": []});
    assert!(matches!(render("", &[], false, &none, &extra), Err(ChatError::ReservedVariable(k)) if k == "messages"));
}

#[test]
fn tojson_options() {
    let extra = json!({"x": {"b": 1, "a": [true, null, "é<&>"]}});
    let none = SpecialTokens::default();
    let out = render("{{ x | tojson }}|{{ x | tojson(sort_keys=true, ensure_ascii=true) }}", &[], false, &none, &extra);
    assert_eq!(out.unwrap(), r#"{"b": 1, "a": [true, null, "é<&>"]}|{"a": [true, null, "\u00e9<&>"], "b": 1}"#);
    let out = render("{{ x | tojson(separators=(',', ':')) }}", &[], false, &none, &extra);
    assert_eq!(out.unwrap(), r#"{"b":1,"a":[true,null,"é<&>"]}"#);
}

#[test]
fn template_chosen_from_tokenizer_config() {
    let raw = json!({
        "bos_token": "<s>",
        "eos_token": {"content": "</s>", "lstrip": false},
        "chat_template": [
            {"name": "default", "template": "D{{ bos_token }}"},
            {"name": "tool_use", "template": "T{{ eos_token }}"}
        ]
    });
    let config = TokenizerConfig::from_value(Path::new("tokenizer_config.json"), raw).unwrap();
    let special = special_tokens_from_config(&config);
    assert_eq!(special.eos_token.as_deref(), Some("</s>"));
    let default = select_template(&config, None).unwrap();
    assert_eq!(render(default, &[], false, &special, &Value::Null).unwrap(), "D<s>");
    let tool = select_template(&config, Some("tool_use")).unwrap();
    assert_eq!(render(tool, &[], false, &special, &Value::Null).unwrap(), "T</s>");
    let missing = select_template(&config, Some("rag")).unwrap_err().to_string();
    assert!(missing.contains("rag") && missing.contains("tool_use"), "{missing}");

    let single = TokenizerConfig::from_value(Path::new("t.json"), json!({"chat_template": "X"})).unwrap();
    assert_eq!(select_template(&single, None).unwrap(), "X");
    let empty = TokenizerConfig::from_value(Path::new("t.json"), json!({})).unwrap();
    assert!(matches!(select_template(&empty, None), Err(ChatError::NoTemplate(_))));
}

/// A namespace assigned into itself printed through every printing path: a render error that
/// names the cause (minijinja prints by recursion: unguarded, the stack overflowed and the process
/// aborted; fuzz/regressions/chat_template/namespace-holds-itself.jinja is the fuzzer's find).
#[test]
fn a_value_holding_itself_is_an_error_not_a_stack_overflow() {
    let cycles = ["{% set ns.x = ns %}", "{% set ns.x = [1, ns] %}", "{% set ns.x = {'a': ns} %}{% set ns.y = ns %}"];
    let prints =
        ["{{ ns }}", "{{ ns | tojson }}", "{{ ns | string }}", "{{ [ns] | join(',') }}", "{{ ns | e }}", "{{ ns.x }}"];
    for cycle in cycles {
        for print in prints {
            let template = format!("{{% set ns = namespace(x=0) %}}{cycle}\n{print}");
            match run(&template) {
                Err(ChatError::Render { message, line }) => {
                    assert!(message.contains("does a namespace hold itself"), "{template}: {message}");
                    assert_eq!(line, Some(2), "{template}");
                }
                other => panic!("{template}: {other:?}"),
            }
        }
    }
}

/// The bound is on depth alone: data nested 100 lists deep prints as it is (as json.dumps does),
/// 200 deep is the same error.
#[test]
fn deep_data_prints_up_to_the_bound() {
    let nested = |depth: usize| (0..depth).fold(json!(1), |inner, _| json!([inner]));
    let render_deep = |depth: usize| {
        let extra = json!({ "deep": nested(depth) });
        render("{{ deep | tojson }}|{{ deep }}", &[Message::user("hi")], false, &SpecialTokens::default(), &extra)
    };
    let text = render_deep(100).unwrap();
    let want = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    assert_eq!(text, format!("{want}|{want}"));
    match render_deep(200) {
        Err(ChatError::Render { message, .. }) => assert!(message.contains("nested more than 128"), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// A syntax error past column 65,535 of a line (an unclosed comment at the end of a 70,000
/// character line, the fuzzer's find in fuzz/regressions/tokenizer_config/) is an error: the
/// engine's column counter overflows there, which panicked where overflow checks are on.
#[test]
fn a_syntax_error_on_a_very_long_line_is_an_error() {
    let template = format!("{}{{#", "y".repeat(70_000));
    match run(&template) {
        Err(ChatError::Syntax { .. } | ChatError::Render { .. }) => {}
        other => panic!("{other:?}"),
    }
}
