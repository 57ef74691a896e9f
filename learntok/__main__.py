from learntok.cli import main

raise SystemExit(main())
