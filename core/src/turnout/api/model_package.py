"""Model packages: one folder, several compiled variants of each model, one picked per machine.

onnxruntime's package format (1.32), read and written as onnxruntime does: `manifest.json` at
the package root holds `schema_version` ("<major>.<minor>"), optional `package_name`,
`package_version`, `description`, `layout` ("portable" or "installed"),
`additional_metadata`, and `components`: a name maps to the component object, or to the path
of a JSON file (or of a folder holding `component.json`). A component lists `variants`; a
variant names its `variant_directory` (relative to the package root), the `ep` and `device`
it was made for, its `compatibility_string`, and `executor_info["ort"]` with `model_file`
(relative to the variant's folder), `session_options` and `provider_options`.

Selecting a variant (`ModelPackageContext.select_component`) is turnout's: the candidate
providers are those the session options ask for (`add_provider`, a selection policy), then the
host providers that serve the CPU request, then the numpy CPU provider, as a session would
place them. A variant is a candidate when its `ep` is one of them, its `device` is one the
provider's probe lists, and its compiled model suits the provider (`EP_UNSUPPORTED` excluded,
see `turnout.api.ep_compatibility`; the string is the variant's `compatibility_string`, else
the one its model records). The first provider in that order with a candidate wins; among its
candidates an exact compatibility match comes before a model that compiles nothing, then the
manifest's order decides.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from turnout.api.ep_compatibility import (
    OrtCompiledModelCompatibility,
    get_compatibility_info_from_model,
    get_model_compatibility_for_ep_devices,
)
from turnout.api.ep_devices import OrtEpDevice, get_ep_devices, policy_provider_specs
from turnout.engine.provider_selection import CPU_PROVIDER
from turnout.graph.errors import Fail, InvalidArgument, NoSuchFile

__all__ = [
    "MANIFEST",
    "ModelPackage",
    "ModelPackageComponentContext",
    "ModelPackageContext",
    "ModelPackageOptions",
    "ModelPackageWriteMode",
]

MANIFEST = "manifest.json"
COMPONENT_FILE = "component.json"
SCHEMA_VERSION = "1.0"
_TOP_KEYS = frozenset(
    {
        "schema_version",
        "layout",
        "components",
        "package_name",
        "package_version",
        "description",
        "additional_metadata",
        "shared_assets",
    }
)
# a variant's compatibility, best first (EP_UNSUPPORTED never selected)
_RANK = {
    OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL: 0,
    OrtCompiledModelCompatibility.EP_NOT_APPLICABLE: 1,
    OrtCompiledModelCompatibility.EP_SUPPORTED_PREFER_RECOMPILATION: 2,
}


class ModelPackageWriteMode(enum.IntEnum):
    """How `ModelPackage.commit` writes: PRESERVE keeps components that live in their own
    files there; DENSE writes every component into the manifest."""

    PRESERVE = 0
    DENSE = 1


def _loads(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{what}: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what}: must be a JSON object")
    return value


def _check_component(name: str, comp: dict[str, Any]) -> None:
    variants = comp.get("variants")
    if variants is None:
        raise InvalidArgument(f"component '{name}': missing required 'variants' object.")
    if not isinstance(variants, dict):
        raise InvalidArgument(f"component '{name}': 'variants' must be an object.")
    for vname, v in variants.items():
        if not isinstance(v, dict):
            raise InvalidArgument(f"component '{name}': variant '{vname}' must be an object.")
        if "variant_directory" in v and not isinstance(v["variant_directory"], str):
            raise InvalidArgument(f"variant '{vname}': variant_directory must be a string.")
        if not isinstance(v.get("executor_info", {}), dict):
            raise InvalidArgument(f"variant '{vname}': executor_info must be an object.")


class _Package:
    """A parsed package: its root, its manifest and its components (external ones read)."""

    def __init__(self, root: str | os.PathLike[str], manifest: dict[str, Any]) -> None:
        self.root = Path(root).resolve()
        self.manifest = manifest
        self.external: dict[str, str] = {}  # component -> its path as the manifest says
        self.components: dict[str, dict[str, Any]] = {}
        for name, ref in manifest.get("components", {}).items():
            if isinstance(ref, str):
                self.external[name] = ref
                ref = self._read_component(ref)
            if not isinstance(ref, dict):
                raise InvalidArgument(f"manifest: component '{name}' must be an object or a path")
            _check_component(name, ref)
            self.components[name] = ref

    @classmethod
    def read(cls, root: str | os.PathLike[str]) -> _Package:
        path = Path(root) / MANIFEST
        if not path.is_file():
            raise NoSuchFile(f"model package {os.fspath(root)!r} has no {MANIFEST}")
        manifest = _loads(path.read_text(encoding="utf-8"), f"{path}")
        unknown = sorted(set(manifest) - _TOP_KEYS)
        if unknown:
            raise InvalidArgument(f"manifest: unknown field '{unknown[0]}'")
        version = manifest.get("schema_version")
        if version is None:
            raise InvalidArgument("manifest: missing required 'schema_version'.")
        if not isinstance(version, str) or len(version.split(".")) != 2:
            raise InvalidArgument(
                "manifest: 'schema_version' must be a \"<major>.<minor>\" string."
            )
        if not isinstance(manifest.get("components"), dict):
            raise InvalidArgument("manifest: missing required 'components' object.")
        if manifest.get("layout", "portable") not in ("portable", "installed"):
            raise InvalidArgument("manifest: 'layout' must be 'portable' or 'installed'.")
        return cls(root, manifest)

    def _read_component(self, ref: str) -> Any:
        path = self.resolve(ref, must_exist=True)
        if path.is_dir():
            path = path / COMPONENT_FILE
        return _loads(path.read_text(encoding="utf-8"), f"component file {path}")

    def resolve(self, ref: str, base: Path | None = None, must_exist: bool = False) -> Path:
        """A path the package names, inside the package unless its layout is "installed"."""
        path = ((base or self.root) / ref).resolve()
        portable = self.manifest.get("layout", "portable") == "portable"
        if portable and not path.is_relative_to(self.root):
            raise InvalidArgument(f"model package path {ref!r} leaves the package root")
        if must_exist and not path.exists():
            raise NoSuchFile(f"ResolvePath: '{path}' does not exist.")
        return path

    def variants(self, component: str) -> dict[str, dict[str, Any]]:
        try:
            found: dict[str, dict[str, Any]] = self.components[component]["variants"]
        except KeyError:
            raise InvalidArgument(f"model package has no component '{component}'") from None
        return found

    def variant(self, component: str, name: str) -> dict[str, Any]:
        try:
            return self.variants(component)[name]
        except KeyError:
            raise InvalidArgument(f"component '{component}' has no variant '{name}'") from None

    def variant_dir(self, variant: dict[str, Any]) -> Path:
        return self.resolve(variant.get("variant_directory", "."), must_exist=True)


def _ort_info(variant: dict[str, Any]) -> dict[str, Any]:
    info = variant.get("executor_info", {}).get("ort", {})
    return _loads(info, "executor_info['ort']") if isinstance(info, str) else dict(info)


class ModelPackageOptions:
    """The providers a selection considers, from session options (as a session would)."""

    def __init__(self, sess_options: Any) -> None:
        if sess_options.has_providers():
            specs = list(sess_options._providers)
        elif sess_options.has_selection_policy():
            specs = policy_provider_specs(sess_options._ep_policy, sess_options._ep_delegate, {})
        else:
            specs = []
        from turnout.sdk.plugins import registry

        self.sess_options = sess_options
        self.providers: list[tuple[str, dict[str, str]]] = []
        for name, opts in [*specs, *((f.name, {}) for f in registry.host_providers())]:
            factory = registry.find(name)
            key = factory.name if factory is not None else name
            if key != CPU_PROVIDER and all(key != n for n, _ in self.providers):
                self.providers.append((key, dict(opts)))
        self.providers.append((CPU_PROVIDER, {}))


class ModelPackageComponentContext:
    """The variant of one component selected for this machine; `create_session` loads it."""

    def __init__(
        self, package: _Package, component: str, variant: str, provider_options: dict[str, str]
    ) -> None:
        self._package = package
        self._component = component
        self._variant = variant
        self._provider_options = provider_options

    def get_selected_variant_name(self) -> str:
        return self._variant

    def get_selected_variant_folder_path(self) -> str:
        return os.fspath(self._package.variant_dir(self._info()))

    def _info(self) -> dict[str, Any]:
        return self._package.variant(self._component, self._variant)

    def create_session(self, sess_options: Any = None) -> Any:
        """An `InferenceSession` of the selected variant's model, on the variant's provider.

        With no options the variant's `session_options` (attributes of `SessionOptions`, else
        config entries) and `provider_options` apply; given options are used as they are, with
        their own providers when they name any."""
        from turnout.api.options import SessionOptions
        from turnout.api.session import InferenceSession

        variant = self._info()
        ort = _ort_info(variant)
        model_file = ort.get("model_file")
        if not isinstance(model_file, str):
            raise Fail(
                f'variant \'{self._variant}\' has no executor_info["ort"]["model_file"]. '
                f"Component: {self._component}"
            )
        path = self._package.resolve(model_file, self._package.variant_dir(variant), True)
        opts = sess_options
        if opts is None:
            opts = SessionOptions()
            for key, value in dict(ort.get("session_options", {})).items():
                if key.startswith("_") or not hasattr(opts, key) or callable(getattr(opts, key)):
                    opts.add_session_config_entry(str(key), str(value))
                else:
                    setattr(opts, key, type(getattr(opts, key))(value))
        providers = None
        if not opts.has_providers():
            popts = {**self._provider_options, **dict(ort.get("provider_options", {}))}
            providers = [(variant["ep"], {str(k): str(v) for k, v in popts.items()})]
        return InferenceSession(os.fspath(path), opts, providers=providers)


class ModelPackageContext:
    """An existing package, opened to list its components and variants and select one."""

    def __init__(self, package_root: str | os.PathLike[str]) -> None:
        self._package = _Package.read(package_root)

    def get_schema_version(self) -> int:
        return int(str(self._package.manifest["schema_version"]).split(".")[0])

    def get_component_count(self) -> int:
        return len(self._package.components)

    def get_component_names(self) -> list[str]:
        return list(self._package.components)

    def get_variant_count(self, component_name: str) -> int:
        return len(self._package.variants(component_name))

    def get_variant_names(self, component_name: str) -> list[str]:
        return list(self._package.variants(component_name))

    def get_variant_ep_name(self, component_name: str, variant_name: str) -> str | None:
        ep = self._package.variant(component_name, variant_name).get("ep")
        return None if ep is None else str(ep)

    def resolve_string_ref(
        self, string_ref: str, base_dir: str | None = None, must_exist: bool = False
    ) -> str:
        base = Path(base_dir) if base_dir else None
        return os.fspath(self._package.resolve(string_ref, base, must_exist))

    def select_component(
        self, component_name: str, options: ModelPackageOptions
    ) -> ModelPackageComponentContext:
        """The best variant of `component_name` for the providers of `options` (module doc)."""
        variants = self._package.variants(component_name)
        devices = get_ep_devices()
        for ep, popts in options.providers:
            ranked = []
            for order, (vname, v) in enumerate(variants.items()):
                rank = self._rank(v, ep, popts, devices)
                if rank is not None:
                    ranked.append((rank, order, vname))
            if ranked:
                return ModelPackageComponentContext(
                    self._package, component_name, min(ranked)[2], popts
                )
        raise Fail(
            f"model package component '{component_name}': No suitable model variant found for "
            f"the configured execution providers ({', '.join(n for n, _ in options.providers)})."
        )

    def _rank(
        self, variant: dict[str, Any], ep: str, popts: dict[str, str], devices: list[OrtEpDevice]
    ) -> int | None:
        from turnout.sdk.plugins import registry

        factory = registry.find(str(variant.get("ep", "")))
        if factory is None or factory.name != ep:
            return None
        mine = [d for d in devices if d.ep_name == ep]
        want = variant.get("device")
        if want is not None:
            mine = [d for d in mine if d.device.type.name.lower() == str(want).lower()]
        if not mine:
            return None
        info = variant.get("compatibility_string") or self._recorded(variant, ep)
        if not info:
            return _RANK[OrtCompiledModelCompatibility.EP_NOT_APPLICABLE]
        devs = [_with_options(d, popts) for d in mine]
        return _RANK.get(get_model_compatibility_for_ep_devices(devs, info))

    def _recorded(self, variant: dict[str, Any], ep: str) -> str | None:
        model_file = _ort_info(variant).get("model_file")
        if not isinstance(model_file, str):
            return None
        path = self._package.resolve(model_file, self._package.variant_dir(variant))
        found = get_compatibility_info_from_model(path, ep) if path.is_file() else None
        return None if found is None else str(found)


def _with_options(device: OrtEpDevice, options: dict[str, str]) -> OrtEpDevice:
    from dataclasses import replace

    return replace(device, ep_options={**device.ep_options, **options})


class ModelPackage:
    """Writes a package: metadata, components and their variants, then `commit`."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._manifest: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "components": {}}
        self._components: dict[str, dict[str, Any]] = {}
        self._external: dict[str, str] = {}

    @staticmethod
    def open(
        package_root: str,
        allow_external_paths: bool = False,
        follow_symlinks: bool = True,
        strict_unknown_fields: bool = True,
    ) -> ModelPackage:
        """An existing package, to change and commit in place (or elsewhere)."""
        package = _Package.read(package_root)
        out = ModelPackage()
        out._root = package.root
        out._manifest = dict(package.manifest)
        out._components = package.components
        out._external = package.external
        return out

    @staticmethod
    def compute_directory_hash(source_dir: str) -> str:
        """ "sha256:" and the digest of a folder's files (relative paths and contents, sorted)."""
        root = Path(source_dir)
        if not root.is_dir():
            raise NoSuchFile(f"compute_directory_hash: {source_dir!r} is not a folder")
        h = hashlib.sha256()
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
        return "sha256:" + h.hexdigest()

    def set_metadata(
        self, name: str | None = None, version: str | None = None, description: str | None = None
    ) -> None:
        for key, value in (("package_name", name), ("package_version", version)):
            if value is not None:
                self._manifest[key] = value
        if description is not None:
            self._manifest["description"] = description

    def set_layout(self, layout: str) -> None:
        if layout not in ("portable", "installed"):
            raise InvalidArgument("manifest: 'layout' must be 'portable' or 'installed'.")
        self._manifest["layout"] = layout

    def set_additional_metadata_json(
        self,
        scope: str,
        component_name: str | None = None,
        variant_name: str | None = None,
        json: str | None = None,
    ) -> None:
        """Set (or with json=None remove) `additional_metadata` of the package, a component or
        a variant (`scope`: "package", "component" or "variant")."""
        where = {
            "package": lambda: self._manifest,
            "component": lambda: self._component(component_name or ""),
            "variant": lambda: self._variant(component_name or "", variant_name or ""),
        }
        if scope not in where:
            raise InvalidArgument(f"scope must be one of {sorted(where)}, not {scope!r}")
        target = where[scope]()
        if json is None:
            target.pop("additional_metadata", None)
        else:
            target["additional_metadata"] = _loads(json, "additional metadata")

    def set_component_inline(self, name: str, component_json: str) -> None:
        comp = _loads(component_json, f"component '{name}'")
        _check_component(name, comp)
        for vname, v in comp["variants"].items():
            self._check_variant_dir(vname, v)
        self._components[name] = comp
        self._external.pop(name, None)

    def set_component_external(self, name: str, path: str) -> None:
        """A component kept in its own JSON file (or a folder's `component.json`)."""
        package = _Package(self._base(), {"components": {name: path}})
        self._components[name] = package.components[name]
        self._external[name] = path

    def set_variant(self, component_name: str, variant_name: str, variant_json: str) -> None:
        if component_name not in self._components:
            raise InvalidArgument(f"SetVariant: component '{component_name}' not found.")
        variant = _loads(variant_json, f"variant '{variant_name}'")
        _check_component(component_name, {"variants": {variant_name: variant}})
        self._check_variant_dir(variant_name, variant)
        self._components[component_name]["variants"][variant_name] = variant

    def set_variant_executor_info_inline(
        self, component_name: str, variant_name: str, namespace_key: str, info_json: str
    ) -> None:
        info = _loads(info_json, f"executor_info['{namespace_key}']")
        variant = self._variant(component_name, variant_name)
        variant.setdefault("executor_info", {})[namespace_key] = info

    def remove_variant_executor_info(
        self, component_name: str, variant_name: str, namespace_key: str
    ) -> None:
        self._variant(component_name, variant_name).get("executor_info", {}).pop(namespace_key)

    def remove_variant(self, component_name: str, variant_name: str) -> None:
        self._variant(component_name, variant_name)
        del self._component(component_name)["variants"][variant_name]

    def remove_component(self, name: str) -> None:
        self._component(name)
        del self._components[name]
        self._external.pop(name, None)

    def get_component_json(self, component_name: str) -> str:
        return json.dumps(self._component(component_name), separators=(",", ":"))

    def get_variant_json(self, component_name: str, variant_name: str) -> str:
        return json.dumps(self._variant(component_name, variant_name), separators=(",", ":"))

    def resolve_string_ref(
        self, string_ref: str, base_dir: str | None = None, must_exist: bool = False
    ) -> str:
        package = _Package(self._base(), {"layout": self._manifest.get("layout", "portable")})
        return os.fspath(
            package.resolve(string_ref, Path(base_dir) if base_dir else None, must_exist)
        )

    def get_info(self) -> dict[str, Any]:
        """The package's metadata, components and variants, as a dict."""
        version = str(self._manifest.get("schema_version", SCHEMA_VERSION)).split(".")
        extra = self._manifest.get("additional_metadata")
        return {
            "schema_version_major": int(version[0]),
            "schema_version_minor": int(version[1]),
            "package_name": self._manifest.get("package_name"),
            "package_version": self._manifest.get("package_version"),
            "description": self._manifest.get("description"),
            "layout": self._manifest.get("layout", "portable"),
            "additional_metadata_json": None if extra is None else json.dumps(extra),
            "components": [self._component_info(n, c) for n, c in self._components.items()],
        }

    def _component_info(self, name: str, comp: dict[str, Any]) -> dict[str, Any]:
        extra = comp.get("additional_metadata")
        return {
            "name": name,
            "additional_metadata_json": None if extra is None else json.dumps(extra),
            "variants": [
                {
                    "name": vname,
                    "variant_directory": v.get("variant_directory"),
                    "ep": v.get("ep"),
                    "device": v.get("device"),
                    "compatibility_string": v.get("compatibility_string"),
                    "executor_info": {
                        k: json.dumps(i, separators=(",", ":"))
                        for k, i in v.get("executor_info", {}).items()
                    },
                }
                for vname, v in comp["variants"].items()
            ],
        }

    def commit(
        self,
        dest_root: str | None = None,
        mode: ModelPackageWriteMode = ModelPackageWriteMode.PRESERVE,
    ) -> None:
        """Write the manifest: in place (an opened package), or into `dest_root`, which must be
        empty or absent; the package's files are copied there first."""
        if dest_root is None:
            if self._root is None:
                raise InvalidArgument("commit: a new package needs dest_root")
            dest = self._root
        else:
            dest = Path(dest_root)
            if dest.exists() and any(dest.iterdir()):
                raise InvalidArgument(f"Commit dest_root '{dest_root}' is not empty.")
            if self._root is not None:
                shutil.copytree(self._root, dest, dirs_exist_ok=True)
            dest.mkdir(parents=True, exist_ok=True)
        manifest = dict(self._manifest)
        components: dict[str, Any] = {}
        for name, comp in self._components.items():
            ref = self._external.get(name)
            if ref is not None and mode == ModelPackageWriteMode.PRESERVE:
                target = (dest / ref).resolve()
                target = target / COMPONENT_FILE if target.is_dir() else target
                target.write_text(json.dumps(comp, indent=2), encoding="utf-8")
                components[name] = ref
            else:
                components[name] = comp
        manifest["components"] = components
        (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        self._root = dest.resolve()

    def close(self) -> None:
        """Forget the package (nothing is written that `commit` did not write)."""
        self._components = {}
        self._external = {}

    # ------------------------------------------------------------------ helpers
    def _base(self) -> Path:
        return self._root if self._root is not None else Path.cwd()

    def _component(self, name: str) -> dict[str, Any]:
        try:
            return self._components[name]
        except KeyError:
            raise InvalidArgument(f"model package has no component '{name}'") from None

    def _variant(self, component: str, name: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self._component(component)["variants"][name]
        except KeyError:
            raise InvalidArgument(f"component '{component}' has no variant '{name}'") from None
        return found

    def _check_variant_dir(self, name: str, variant: dict[str, Any]) -> None:
        ref = variant.get("variant_directory")
        if isinstance(ref, str) and not (self._base() / ref).exists():
            raise NoSuchFile(f"ResolvePath: '{ref}' does not exist.")
