from seamline.cli.main import main

raise SystemExit(main())
