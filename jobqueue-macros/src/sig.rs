//! Checks that the function `#[job]` is on can be a job, and sorts its parameters into the
//! `JobContext` and the arguments that become the payload.

use syn::{FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, Type};

use crate::diagnostics::Errors;

/// One parameter of the job function, in the order written.
pub(crate) enum Param<'a> {
    /// The `JobContext`, passed through from the worker.
    Context { pat: &'a Pat },
    /// Shared state the worker passes: a parameter of type `Data<T>`.
    Data { ty: &'a Type },
    /// An argument: a field of the generated struct, with the `#[serde(...)]` attributes
    /// written on the parameter.
    Arg {
        ident: &'a Ident,
        ty: &'a Type,
        serde: Vec<&'a syn::Attribute>,
    },
}

/// The parameters of a function that passed the checks.
pub(crate) struct JobSignature<'a> {
    pub(crate) params: Vec<Param<'a>>,
}

impl<'a> JobSignature<'a> {
    /// The arguments (not the context), in order.
    pub(crate) fn args(&self) -> impl Iterator<Item = (&'a Ident, &'a Type)> + '_ {
        self.params.iter().filter_map(|p| match p {
            Param::Arg { ident, ty, .. } => Some((*ident, *ty)),
            Param::Context { .. } | Param::Data { .. } => None,
        })
    }

    /// The context parameter's pattern, if there is a context.
    pub(crate) fn context(&self) -> Option<&'a Pat> {
        self.params.iter().find_map(|p| match p {
            Param::Context { pat } => Some(*pat),
            Param::Arg { .. } | Param::Data { .. } => None,
        })
    }

    /// The `Data<T>` parameters' types, in order.
    pub(crate) fn data(&self) -> impl Iterator<Item = &'a Type> + '_ {
        self.params.iter().filter_map(|p| match p {
            Param::Data { ty } => Some(*ty),
            Param::Context { .. } | Param::Arg { .. } => None,
        })
    }
}

/// Checks the signature; every mistake goes to `errors`.
pub(crate) fn check<'a>(func: &'a ItemFn, errors: &mut Errors) -> JobSignature<'a> {
    let sig = &func.sig;
    let name = &sig.ident;
    if sig.asyncness.is_none() {
        errors.push_spanned(
            sig.fn_token,
            format!("a job function must be `async`: write `async fn {name}`"),
        );
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push_spanned(
            unsafety,
            "a job function cannot be `unsafe`: the worker calls it from safe code",
        );
    }
    if !sig.generics.params.is_empty() {
        errors.push_spanned(
            &sig.generics,
            "a job function cannot be generic: the worker decodes the payload into one concrete type per job; use concrete argument types",
        );
    } else if let Some(where_clause) = &sig.generics.where_clause {
        errors.push_spanned(
            where_clause,
            "a job function cannot have a `where` clause: use concrete argument types",
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.push_spanned(variadic, "a job function cannot be variadic");
    }

    let mut params = Vec::new();
    let mut context_seen = false;
    for input in &sig.inputs {
        let arg = match input {
            FnArg::Receiver(receiver) => {
                errors.push_spanned(
                    receiver,
                    "a job function cannot take `self`: write a free function; its arguments become the fields of the generated struct",
                );
                continue;
            }
            FnArg::Typed(arg) => arg,
        };
        if is_context(&arg.ty) {
            if context_seen {
                errors.push_spanned(
                    &arg.ty,
                    "a job function takes at most one `JobContext`; remove this one",
                );
            }
            context_seen = true;
            params.push(Param::Context { pat: &arg.pat });
            continue;
        }
        if is_data(&arg.ty) {
            params.push(Param::Data { ty: &arg.ty });
            continue;
        }
        let ident = match &*arg.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => &p.ident,
            Pat::Ident(p) if p.by_ref.is_some() => {
                errors.push_spanned(
                    p.by_ref,
                    "a job argument cannot be bound by `ref`: remove `ref`; the argument is owned",
                );
                continue;
            }
            Pat::Wild(_) => {
                errors.push_spanned(
                    &arg.pat,
                    "a job argument needs a name: it becomes a field of the generated struct; write `_name: Type` for an unused one",
                );
                continue;
            }
            _ => {
                errors.push_spanned(
                    &arg.pat,
                    "a job argument must be a plain name, as in `order_id: u64`: it becomes a field of the generated struct; destructure it in the body",
                );
                continue;
            }
        };
        if let Some(message) = not_owned(&arg.ty) {
            errors.push_spanned(&arg.ty, message);
            continue;
        }
        let serde = arg
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("serde"))
            .collect();
        params.push(Param::Arg {
            ident,
            ty: &arg.ty,
            serde,
        });
    }
    JobSignature { params }
}

/// Whether a parameter's type is the job context: its last path segment is `JobContext`.
fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Group(group) => is_context(&group.elem),
        Type::Paren(paren) => is_context(&paren.elem),
        Type::Path(path) => {
            path.qself.is_none()
                && path
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "JobContext" && s.arguments.is_none())
        }
        _ => false,
    }
}

/// Whether a parameter's type is shared state: its last path segment is `Data<...>`.
fn is_data(ty: &Type) -> bool {
    match ty {
        Type::Group(group) => is_data(&group.elem),
        Type::Paren(paren) => is_data(&paren.elem),
        Type::Path(path) => {
            path.qself.is_none()
                && path.path.segments.last().is_some_and(|s| {
                    s.ident == "Data" && matches!(s.arguments, PathArguments::AngleBracketed(_))
                })
        }
        _ => false,
    }
}

/// The `T` of a `Data<T>` parameter as the code writes it (`MySqlPool`, `Arc<Greeting>`), for
/// messages about it.
pub(crate) fn data_type_text(ty: &Type) -> Option<String> {
    match ty {
        Type::Group(group) => data_type_text(&group.elem),
        Type::Paren(paren) => data_type_text(&paren.elem),
        Type::Path(path) => match &path.path.segments.last()?.arguments {
            PathArguments::AngleBracketed(args) => match args.args.first()? {
                GenericArgument::Type(inner) => Some(type_text(inner)),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// A type's tokens as a person writes them: `Arc<Greeting>`, not `Arc < Greeting >`.
fn type_text(ty: &Type) -> String {
    let mut text = quote::ToTokens::to_token_stream(ty).to_string();
    for (spaced, tight) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        (" ;", ";"),
        ("& ", "&"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
    ] {
        text = text.replace(spaced, tight);
    }
    text
}

/// Why an argument type cannot be decoded from a stored payload, if it borrows or is not a
/// concrete type.
fn not_owned(ty: &Type) -> Option<String> {
    const WHY: &str =
        "job arguments must be owned: the worker decodes them from the stored payload";
    let offending = borrowed_part(ty)?;
    Some(match offending {
        Type::Reference(reference) => {
            let owned = match &*reference.elem {
                Type::Path(p) if p.path.is_ident("str") => "String".to_owned(),
                Type::Path(p) if p.path.is_ident("Path") => "PathBuf".to_owned(),
                Type::Slice(slice) => format!("Vec<{}>", tokens(&slice.elem)),
                elem => tokens(elem),
            };
            format!(
                "{WHY}; use `{owned}` instead of `{}`",
                tokens(offending)
            )
        }
        Type::ImplTrait(_) => format!(
            "a job argument needs a concrete type: the worker decodes the payload into it; replace `{}` with a type",
            tokens(offending)
        ),
        _ => format!(
            "{WHY}; `{}` borrows (only `'static` is allowed), use an owned type such as `String`",
            tokens(offending)
        ),
    })
}

/// The reference, `impl Trait` or type with a non-`'static` lifetime inside `ty`.
fn borrowed_part(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Reference(_) | Type::ImplTrait(_) => Some(ty),
        Type::Group(group) => borrowed_part(&group.elem),
        Type::Paren(paren) => borrowed_part(&paren.elem),
        Type::Array(array) => borrowed_part(&array.elem),
        Type::Slice(slice) => borrowed_part(&slice.elem),
        Type::Tuple(tuple) => tuple.elems.iter().find_map(borrowed_part),
        Type::Path(path) => path.path.segments.iter().find_map(|segment| {
            let PathArguments::AngleBracketed(args) = &segment.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(inner) => borrowed_part(inner),
                GenericArgument::Lifetime(lifetime) if lifetime.ident != "static" => Some(ty),
                _ => None,
            })
        }),
        _ => None,
    }
}

fn tokens(ty: &Type) -> String {
    let text = quote::ToTokens::to_token_stream(ty).to_string();
    // `quote` spaces every token; close the gaps a person would not write.
    text.replace(" < ", "<")
        .replace(" >", ">")
        .replace("< ", "<")
        .replace(" ,", ",")
        .replace("& ", "&")
        .replace(" :: ", "::")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace("' ", "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_of(func: ItemFn) -> Vec<String> {
        let mut errors = Errors::default();
        check(&func, &mut errors);
        errors.messages()
    }

    #[test]
    fn context_is_found_by_type_in_any_position() {
        let func: ItemFn = syn::parse_quote! {
            async fn f(a: u64, mut b: String, c: jobqueue::JobContext, d: Vec<u8>) {}
        };
        let mut errors = Errors::default();
        let sig = check(&func, &mut errors);
        assert!(errors.finish().is_ok());
        let names: Vec<String> = sig.args().map(|(i, _)| i.to_string()).collect();
        assert_eq!(names, ["a", "b", "d"]);
        assert!(matches!(sig.params[2], Param::Context { .. }));
    }

    #[test]
    fn data_parameters_are_state_not_arguments() {
        let func: ItemFn = syn::parse_quote! {
            async fn f(db: Data<Pool>, #[serde(default)] n: u32, q: jobqueue::Data<Queue>, data: Vec<u8>) {}
        };
        let mut errors = Errors::default();
        let sig = check(&func, &mut errors);
        assert!(errors.finish().is_ok());
        let names: Vec<String> = sig.args().map(|(i, _)| i.to_string()).collect();
        assert_eq!(names, ["n", "data"]);
        assert_eq!(sig.data().count(), 2);
        assert!(matches!(&sig.params[1], Param::Arg { serde, .. } if serde.len() == 1));
    }

    #[test]
    fn every_mistake_is_reported() {
        let errors = errors_of(syn::parse_quote! {
            fn f<T>(_: u64, (a, b): (u8, u8), s: &str, c: JobContext, d: JobContext, ref e: u8) {}
        });
        assert_eq!(errors.len(), 7, "{errors:#?}");
        assert!(errors[0].contains("must be `async`: write `async fn f`"));
        assert!(errors[1].contains("cannot be generic"));
        assert!(errors[2].contains("needs a name"));
        assert!(errors[3].contains("plain name"));
        assert!(errors[4].contains("use `String` instead of `&str`"));
        assert!(errors[5].contains("at most one `JobContext`"));
        assert!(errors[6].contains("`ref`"));
    }

    #[test]
    fn borrowed_types_suggest_owned_ones() {
        let message = |ty: Type| not_owned(&ty);
        assert_eq!(
            message(syn::parse_quote!(&[u8])).unwrap(),
            "job arguments must be owned: the worker decodes them from the stored payload; use `Vec<u8>` instead of `&[u8]`"
        );
        assert!(message(syn::parse_quote!(Vec<&'a str>))
            .unwrap()
            .contains("use `String` instead of `&'a str`"));
        assert!(message(syn::parse_quote!(Cow<'a, str>))
            .unwrap()
            .contains("`Cow<'a, str>` borrows"));
        assert!(message(syn::parse_quote!(impl Into<String>))
            .unwrap()
            .contains("concrete type"));
        assert!(message(syn::parse_quote!(Cow<'static, str>)).is_none());
        assert!(message(syn::parse_quote!(HashMap<String, Vec<(u8, [i32; 4])>>)).is_none());
    }

    #[test]
    fn data_types_are_named_as_written() {
        let text = |ty: syn::Type| data_type_text(&ty);
        assert_eq!(
            text(syn::parse_quote!(Data<MySqlPool>)).as_deref(),
            Some("MySqlPool")
        );
        assert_eq!(
            text(syn::parse_quote!(jobqueue::Data<std::sync::Arc<Greeting>>)).as_deref(),
            Some("std::sync::Arc<Greeting>")
        );
        assert_eq!(
            text(syn::parse_quote!(Data<Arc<HashMap<String, Vec<u8>>>>)).as_deref(),
            Some("Arc<HashMap<String, Vec<u8>>>")
        );
        assert_eq!(
            text(syn::parse_quote!(Data<&'static [u8; 4]>)).as_deref(),
            Some("&'static [u8; 4]")
        );
        assert_eq!(text(syn::parse_quote!(u64)), None);
    }
}
