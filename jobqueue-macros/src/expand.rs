//! What `#[job]` expands to: the function as written, the argument struct, its `Job` impl and
//! one registration.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, LitStr, Pat, ReturnType, Type};

use crate::args::{self, JobArgs, KeyTemplate, Segment, Unique};
use crate::diagnostics::Errors;
use crate::sig::{self, JobSignature, Param};
use jobqueue_spec::backoff::BackoffSpec;
use jobqueue_spec::duration::Millis;

/// Expands `#[job(args)] item`. On `Err` the caller emits the item unchanged beside the errors.
pub(crate) fn job(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let args = args::parse(args, &mut errors);
    let func: ItemFn = match syn::parse2(item) {
        Ok(func) => func,
        Err(e) => {
            errors.push(syn::Error::new(
                e.span(),
                "`#[job]` goes on an `async fn`: its arguments become the job's payload",
            ));
            errors.finish()?;
            unreachable!("an error was just pushed");
        }
    };
    let sig = sig::check(&func, &mut errors);
    let key = args
        .key
        .as_ref()
        .map(|key| key_format(key, &func, &sig, &mut errors));
    let limit_keys = LimitKeys {
        concurrency: args
            .concurrency_key
            .as_ref()
            .map(|key| key_format(key, &func, &sig, &mut errors)),
        rate: args
            .rate_key
            .as_ref()
            .map(|key| key_format(key, &func, &sig, &mut errors)),
    };
    errors.finish()?;
    Ok(generate(&args, &func, &sig, key, limit_keys))
}

/// The `format!`s of the limit key templates, when given.
struct LimitKeys {
    concurrency: Option<TokenStream>,
    rate: Option<TokenStream>,
}

fn generate(
    args: &JobArgs,
    func: &ItemFn,
    sig: &JobSignature<'_>,
    key: Option<TokenStream>,
    limit_keys: LimitKeys,
) -> TokenStream {
    let root = match &args.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::jobqueue),
    };
    let vis = &func.vis;
    let fn_name = &func.sig.ident;
    let fn_name_text = fn_name.unraw().to_string();
    let ty = Ident::new(&upper_camel(&fn_name_text), fn_name.span());
    let type_path_suffix = format!("::{ty}");
    let kind = match &args.name {
        Some(name) => name.clone(),
        None => LitStr::new(&fn_name_text, fn_name.span()),
    };
    let doc = format!(" Arguments of the [`{fn_name_text}`] job.");
    let serde_crate = LitStr::new(
        &quote!(#root::__private::serde).to_string().replace(' ', ""),
        Span::call_site(),
    );

    // Each field gets a line of docs: crates that deny `missing_docs` take the struct as theirs.
    // `#[serde(...)]` written on a parameter moves to its field.
    let fields = sig.params.iter().filter_map(|param| {
        let Param::Arg { ident, ty, serde } = param else {
            return None;
        };
        let doc = format!(" The `{}` argument.", ident.unraw());
        Some(quote!(#[doc = #doc] #(#serde)* pub #ident: #ty))
    });
    let derive_default = args
        .cron
        .as_ref()
        .map(|_| quote!(, ::core::default::Default));

    let options = job_options(args, &root);
    let task_key = key.map(|format| {
        quote! {
            fn task_key(&self) -> #root::Result<::std::string::String> {
                ::core::result::Result::Ok(#root::__private::fit_key(#format))
            }
        }
    });

    let concurrency_key = limit_keys.concurrency.map(|format| {
        quote! {
            fn concurrency_key(&self) -> ::core::option::Option<::std::string::String> {
                ::core::option::Option::Some(#root::__private::fit_key(#format))
            }
        }
    });
    let rate_key = limit_keys.rate.map(|format| {
        quote! {
            fn rate_key(&self) -> ::core::option::Option<::std::string::String> {
                ::core::option::Option::Some(#root::__private::fit_key(#format))
            }
        }
    });

    let data_types: Vec<&Type> = sig.data().collect();
    let ctx = format_ident!("ctx");
    // Shared state is taken before the call, which may move the context.
    let data_locals: Vec<Ident> = (0..data_types.len())
        .map(|i| format_ident!("__jobqueue_data_{}", i))
        .collect();
    let take_data = data_types.iter().zip(&data_locals).map(|(ty, local)| {
        quote_spanned!(ty.span()=>
            let #local = <#ty as #root::__private::FromJobContext>::from_job_context(&#ctx)?;
        )
    });
    let data_needs = (!data_types.is_empty()).then(|| {
        let needs = data_types.iter().map(|ty| {
            let need = quote_spanned!(ty.span()=> <#ty as #root::__private::FromJobContext>::NEED);
            match sig::data_type_text(ty) {
                Some(text) => quote!(#need.named(#text)),
                None => need,
            }
        });
        quote!(const DATA: &'static [#root::__private::DataNeed] = &[#(#needs),*];)
    });
    let mut next_data = data_locals.iter();
    let call_args: Vec<TokenStream> = sig
        .params
        .iter()
        .map(|param| match param {
            Param::Context { .. } => ctx.to_token_stream(),
            Param::Data { .. } => next_data
                .next()
                .expect("one local per `Data` parameter")
                .to_token_stream(),
            Param::Arg { ident, .. } => quote!(self.#ident),
        })
        .collect();
    // The function as written, less the `#[serde]` attributes that moved to the fields.
    let mut func = func.clone();
    for input in &mut func.sig.inputs {
        if let syn::FnArg::Typed(arg) = input {
            arg.attrs.retain(|a| !a.path().is_ident("serde"));
        }
    }
    // Spanned at the return type, so an unsupported one is reported there.
    let (into_result, output_type) = match &func.sig.output {
        ReturnType::Type(_, ret) => (
            quote_spanned!(ret.span()=> __job_output.keep(output)),
            quote_spanned!(ret.span()=> <#ret as #root::__private::IntoJobResult>::Output),
        ),
        ReturnType::Default => (quote!(__job_output.keep(output)), quote!(())),
    };
    let bound_checks = argument_bound_checks(args, sig, &root);

    let cron_payload = args.cron.as_ref().map(|_| {
        quote! {
            .with_default_payload::<#ty>()
        }
    });

    quote! {
        #func

        #bound_checks

        #[doc = #doc]
        #[derive(
            ::core::fmt::Debug,
            ::core::clone::Clone,
            #root::__private::serde::Serialize,
            #root::__private::serde::Deserialize
            #derive_default
        )]
        #[serde(crate = #serde_crate)]
        #vis struct #ty {
            #(#fields,)*
        }

        impl #root::Job for #ty {
            const KIND: &'static str = #kind;
            const OPTIONS: #root::JobOptions = #options;
            #data_needs
            #task_key
            #concurrency_key
            #rate_key
            async fn run(self, ctx: #root::JobContext) -> ::core::result::Result<(), #root::JobError> {
                #(#take_data)*
                // The function may take the context: its output slot is kept aside.
                let __job_output = #root::__private::OutputSlot::of(&ctx);
                let output = #fn_name(#(#call_args),*).await;
                #into_result
            }
        }

        impl #root::__private::JobOutput for #ty {
            type Output = #output_type;
        }

        #root::__private::inventory::submit! {
            #root::__private::JobDescriptor::of::<#ty>(
                ::core::concat!(::core::module_path!(), #type_path_suffix)
            )
            #cron_payload
        }
    }
}

/// Requires of each argument type what a job needs, spanned at the type so that an error
/// lands on it. (The derives and the `Job` impl fail on such a type too, but they can only
/// point at the attribute.)
fn argument_bound_checks(
    args: &JobArgs,
    sig: &JobSignature<'_>,
    root: &TokenStream,
) -> TokenStream {
    let types: Vec<&Type> = sig.args().map(|(_, ty)| ty).collect();
    if types.is_empty() {
        return TokenStream::new();
    }
    // A cron tick builds the arguments with `Default`.
    let default = args
        .cron
        .as_ref()
        .map(|_| quote!(+ ::core::default::Default));
    let checks = types
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> job_argument::<#ty>();));
    quote! {
        const _: () = {
            const fn job_argument<T>()
            where
                T: #root::__private::serde::Serialize
                    + #root::__private::serde::de::DeserializeOwned
                    + ::core::marker::Send
                    + ::core::marker::Sync
                    #default,
            {
            }
            #(#checks)*
        };
    }
}

/// `JobOptions::DEFAULT` with a builder call for each option given.
fn job_options(args: &JobArgs, root: &TokenStream) -> TokenStream {
    let mut options = quote!(#root::JobOptions::DEFAULT);
    if let Some(queue) = &args.queue {
        options.extend(quote!(.queue(#queue)));
    }
    if let Some(n) = args.max_attempts {
        let n = Literal::u32_unsuffixed(n);
        options.extend(quote!(.max_attempts(#n)));
    }
    if let Some(lease) = args.lease {
        let lease = duration(lease);
        options.extend(quote!(.lease(#lease)));
    }
    if let Some(timeout) = args.timeout {
        let timeout = duration(timeout);
        options.extend(quote!(.timeout(#timeout)));
    }
    if let Some(priority) = args.priority {
        let priority = Literal::i16_unsuffixed(priority);
        options.extend(quote!(.priority(#priority)));
    }
    if let Some(backoff) = &args.backoff {
        let backoff = match *backoff {
            BackoffSpec::Exponential { base, max } => {
                let (base, max) = (duration(base), duration(max));
                quote!(#root::Backoff::Exponential { base: #base, max: #max })
            }
            BackoffSpec::Linear { step, max } => {
                let (step, max) = (duration(step), duration(max));
                quote!(#root::Backoff::Linear { step: #step, max: #max })
            }
            BackoffSpec::Constant(wait) => {
                let wait = duration(wait);
                quote!(#root::Backoff::Constant(#wait))
            }
        };
        options.extend(quote!(.backoff(#backoff)));
    }
    if let Some(cron) = &args.cron {
        options.extend(quote!(.cron(#cron)));
    }
    if let Some(overlap) = &args.overlap {
        options.extend(quote!(.overlap(#overlap)));
    }
    if let Some(unique) = args.unique {
        let unique = match unique {
            Unique::UntilPruned => quote!(#root::Uniqueness::UntilPruned),
            Unique::WhileActive => quote!(#root::Uniqueness::WhileActive),
            Unique::For(period) => {
                let period = duration(period);
                quote!(#root::Uniqueness::For(#period))
            }
        };
        options.extend(quote!(.unique(#unique)));
    }
    if let Some(n) = args.max_snoozes {
        let n = Literal::u32_unsuffixed(n);
        options.extend(quote!(.max_snoozes(#n)));
    }
    if let Some(n) = args.concurrency {
        let n = Literal::u32_unsuffixed(n);
        options.extend(quote!(.concurrency(#n)));
    }
    if let Some((n, window)) = args.rate_limit {
        let (n, window) = (Literal::u32_unsuffixed(n), duration(window));
        options.extend(quote!(.rate_limit(#n, #window)));
    }
    options
}

fn duration(d: Millis) -> TokenStream {
    if d.0 % 1000 == 0 {
        let secs = Literal::u64_unsuffixed(d.0 / 1000);
        quote!(::core::time::Duration::from_secs(#secs))
    } else {
        let millis = Literal::u64_unsuffixed(d.0);
        quote!(::core::time::Duration::from_millis(#millis))
    }
}

/// The `format!` that renders a key template, after checking that every placeholder names
/// an argument.
fn key_format(
    key: &KeyTemplate,
    func: &ItemFn,
    sig: &JobSignature<'_>,
    errors: &mut Errors,
) -> TokenStream {
    let mut format = String::new();
    let mut values = Vec::new();
    for segment in &key.segments {
        match segment {
            Segment::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
            Segment::Arg(name) => {
                match sig.args().find(|(ident, _)| ident.unraw() == name) {
                    Some((ident, _)) => {
                        format.push_str("{}");
                        // The template's span: a type without `Display` is reported at the key.
                        let field = match ident.to_string().strip_prefix("r#") {
                            Some(raw) => Ident::new_raw(raw, key.lit.span()),
                            None => Ident::new(&ident.to_string(), key.lit.span()),
                        };
                        values.push(quote_spanned!(key.lit.span()=> self.#field));
                    }
                    None => errors.push_spanned(&key.lit, unknown_placeholder(name, func, sig)),
                }
            }
        }
    }
    let format = LitStr::new(&format, key.lit.span());
    quote!(::std::format!(#format #(, #values)*))
}

fn unknown_placeholder(name: &str, func: &ItemFn, sig: &JobSignature<'_>) -> String {
    let fn_name = func.sig.ident.unraw();
    let is_context = matches!(
        sig.context(),
        Some(Pat::Ident(p)) if p.ident.unraw() == name
    );
    let args: Vec<String> = sig
        .args()
        .map(|(ident, _)| format!("`{{{}}}`", ident.unraw()))
        .collect();
    let known = if args.is_empty() {
        format!("`{fn_name}` takes no arguments, so its key can only be fixed text")
    } else {
        format!("the arguments of `{fn_name}` are {}", args.join(", "))
    };
    if is_context {
        format!("`{{{name}}}` in the key is the job's `JobContext`, which is not part of the payload; {known}")
    } else {
        format!("`{{{name}}}` in the key is not an argument of `{fn_name}`; {known}")
    }
}

/// `export_order` -> `ExportOrder`.
fn upper_camel(snake: &str) -> String {
    snake
        .split('_')
        .flat_map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars))
                .into_iter()
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_names() {
        assert_eq!(upper_camel("export_order"), "ExportOrder");
        assert_eq!(upper_camel("cleanup"), "Cleanup");
        assert_eq!(upper_camel("_send_v2__now"), "SendV2Now");
        assert_eq!(upper_camel("send_SMS"), "SendSMS");
    }

    #[test]
    fn mistakes_in_options_and_signature_are_reported_together() {
        let error = job(
            quote!(queue = "", key = "{missing}"),
            quote!(
                fn f(a: &str, ctx: JobContext) {}
            ),
        )
        .unwrap_err();
        let messages = crate::diagnostics::messages(error);
        assert_eq!(messages.len(), 4, "{messages:#?}");
        assert!(messages[0].contains("`queue` must be 1 to 64 characters"));
        assert!(messages[1].contains("must be `async`"));
        assert!(messages[2].contains("instead of `&str`"));
        // `a` was rejected, so the key finds no argument at all.
        assert!(messages[3].contains("`{missing}` in the key is not an argument of `f`"));
    }

    #[test]
    fn key_placeholders_name_arguments() {
        let error = job(
            quote!(key = "{ctx}:{id}:{nope}"),
            quote!(
                async fn f(ctx: JobContext, id: u64, name: String) {}
            ),
        )
        .unwrap_err();
        let messages = crate::diagnostics::messages(error);
        assert_eq!(
            messages,
            [
                "`{ctx}` in the key is the job's `JobContext`, which is not part of the payload; the arguments of `f` are `{id}`, `{name}`",
                "`{nope}` in the key is not an argument of `f`; the arguments of `f` are `{id}`, `{name}`",
            ]
        );
    }

    #[test]
    fn crate_option_replaces_every_root_path() {
        let out = job(
            quote!(
                crate = "jq",
                cron = "0 * * * * *",
                key = "{id}",
                backoff = "constant(1s)"
            ),
            quote!(
                async fn f(id: u64) {}
            ),
        )
        .unwrap()
        .to_string();
        assert!(!out.contains("jobqueue"), "{out}");
        assert!(
            out.contains("jq :: __private :: inventory :: submit !"),
            "{out}"
        );
        assert!(
            out.contains(r#"serde (crate = "jq::__private::serde")"#),
            "{out}"
        );
    }

    #[test]
    fn expansion_calls_the_function_in_its_parameter_order() {
        let out = job(
            quote!(key = "k:{{{id}}}"),
            quote!(
                async fn f(id: u64, ctx: JobContext, name: String) {}
            ),
        )
        .unwrap()
        .to_string();
        assert!(
            out.contains("f (self . id , ctx , self . name) . await"),
            "{out}"
        );
        assert!(
            out.contains(r#"format ! ("k:{{{}}}" , self . id)"#),
            "{out}"
        );

        let out = job(
            quote!(key = "{type}"),
            quote!(
                async fn g(r#type: u8) {}
            ),
        )
        .unwrap()
        .to_string();
        assert!(out.contains(r#"format ! ("{}" , self . r#type)"#), "{out}");
    }
}
