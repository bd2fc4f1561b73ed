"""`bidaw token --out FILE`: a new random cluster token, in a file only its owner can read."""
from __future__ import annotations


def register(sub, groups) -> None:
    p = sub.add_parser("token", help="write a new cluster token (the secret every internal "
                       "gRPC call carries)",
                       description="Write a new random cluster token (256 bits) to FILE, mode "
                       "0600, for --cluster-token-file of every service, or for the Kubernetes "
                       "Secret bidaw-cluster-token (see docs/kubernetes.md). The token is "
                       "never printed.")
    p.add_argument("--out", required=True, help="file to write (refused if it exists)")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from services.runtime.cluster_auth import write_token_file

    try:
        write_token_file(args.out, overwrite=args.force)
    except FileExistsError:
        raise SystemExit(f"bidaw token: --out {args.out} exists; --force replaces it") from None
    except OSError as exc:
        raise SystemExit(f"bidaw token: --out {args.out}: {exc.strerror}") from None
    print(f"wrote a new cluster token to {os.path.abspath(args.out)} (mode 0600)")
    return 0
